// Small helpers shared by every FFI handler (CPU and CUDA).
#pragma once

#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace jaxdnn {

namespace ffi = xla::ffi;

inline int64_t LastDim(const ffi::AnyBuffer& b) {
  auto dims = b.dimensions();
  return dims.size() == 0 ? 1 : dims.back();
}

inline const char* DtypeName(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return "float32";
    case ffi::DataType::BF16: return "bfloat16";
    case ffi::DataType::F16: return "float16";
    default: return "unsupported";
  }
}

inline ffi::Error InvalidArg(const std::string& op, const std::string& what) {
  return ffi::Error::InvalidArgument(op + ": " + what);
}

}  // namespace jaxdnn
