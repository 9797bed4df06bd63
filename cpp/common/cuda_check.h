// Turns CUDA launch failures into ffi::Error values with a message.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "common/ffi_util.h"

namespace jaxdnn {

inline ffi::Error CheckLaunch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace jaxdnn
