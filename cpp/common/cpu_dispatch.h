// The CPU kernels' dtype (and activation) dispatch: fn(T{}[, Act constant])
// with T the host element type of `dtype` (float, bf16_t, f16_t), or an
// error naming the op.
#pragma once

#include <string>

#include "common/activation.h"
#include "common/ffi_util.h"
#include "common/host_half.h"

namespace jaxdnn {

// Element i of a float32/bfloat16/float16 buffer whose dtype is known only
// at run time (an optional operand's), as float; and the store back.
inline float LoadAsFloat(const void* data, ffi::DataType dtype, int64_t i) {
  switch (dtype) {
    case ffi::DataType::BF16: return ToFloat(static_cast<const bf16_t*>(data)[i]);
    case ffi::DataType::F16: return ToFloat(static_cast<const f16_t*>(data)[i]);
    default: return static_cast<const float*>(data)[i];
  }
}

inline void StoreFromFloat(void* data, ffi::DataType dtype, int64_t i, float v) {
  switch (dtype) {
    case ffi::DataType::BF16: static_cast<bf16_t*>(data)[i] = FromFloat<bf16_t>(v); break;
    case ffi::DataType::F16: static_cast<f16_t*>(data)[i] = FromFloat<f16_t>(v); break;
    default: static_cast<float*>(data)[i] = v;
  }
}

// fn(T{}) with T the host element type of `dtype`, or an error naming the op.
template <typename Fn>
ffi::Error ByDtypeCpu(ffi::DataType dtype, const char* op, Fn fn) {
  switch (dtype) {
    case ffi::DataType::F32: fn(float{}); break;
    case ffi::DataType::BF16: fn(bf16_t{}); break;
    case ffi::DataType::F16: fn(f16_t{}); break;
    default: return InvalidArg(op, std::string("unsupported dtype ") + DtypeName(dtype));
  }
  return ffi::Error::Success();
}

template <typename Fn>
ffi::Error ByDtypeActCpu(ffi::DataType dtype, int32_t act, const char* op, Fn fn) {
  bool known = true;
  ffi::Error e = ByDtypeCpu(dtype, op, [&](auto t) { known = ByAct(act, [&](auto a) { fn(t, a); }); });
  if (e.failure()) return e;
  if (!known) return InvalidArg(op, "unknown activation code " + std::to_string(act));
  return ffi::Error::Success();
}

}  // namespace jaxdnn
