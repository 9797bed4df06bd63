// Turns CUDA launch failures into ffi::Error values with a message.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "common/ffi_util.h"

namespace jaxdnn {

inline ffi::Error CheckLaunch(const std::string& what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(what + ": " + cudaGetErrorString(err));
}

// Clears a launch error some earlier, unrelated call left pending, so that
// CheckLaunch after this handler's launches reports only its own.
inline void ClearStaleLaunchError() { (void)cudaGetLastError(); }

}  // namespace jaxdnn
