// The CPU kernels' dtype x activation dispatch: fn(T{}, Act constant) with T
// the host element type of `dtype` (float, bf16_t, f16_t), or an error
// naming the op.
#pragma once

#include <string>

#include "common/activation.h"
#include "common/ffi_util.h"
#include "common/host_half.h"

namespace jaxdnn {

template <typename Fn>
ffi::Error ByDtypeActCpu(ffi::DataType dtype, int32_t act, const char* op, Fn fn) {
  bool known = false;
  auto with_type = [&](auto t) { known = ByAct(act, [&](auto a) { fn(t, a); }); };
  switch (dtype) {
    case ffi::DataType::F32: with_type(float{}); break;
    case ffi::DataType::BF16: with_type(bf16_t{}); break;
    case ffi::DataType::F16: with_type(f16_t{}); break;
    default: return InvalidArg(op, std::string("unsupported dtype ") + DtypeName(dtype));
  }
  if (!known) return InvalidArg(op, "unknown activation code " + std::to_string(act));
  return ffi::Error::Success();
}

}  // namespace jaxdnn
