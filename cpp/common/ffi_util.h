// Small helpers shared by every FFI handler (CPU and CUDA).
#pragma once

#include <cstdint>
#include <exception>
#include <new>
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

// Runs a CPU handler's body, turning an exception (a failed host allocation,
// say) into an ffi::Error naming the op instead of letting it reach XLA.
template <typename Fn>
ffi::Error RunCatching(const char* op, Fn&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return ffi::Error(ffi::ErrorCode::kResourceExhausted, std::string(op) + ": out of host memory");
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string(op) + ": " + e.what());
  }
}

}  // namespace jaxdnn
