// CUDA LayerNorm / RMSNorm launchers (enqueue on `stream`, never synchronize).
#pragma once

#include <cuda_runtime_api.h>

#include "norms/problem.h"

namespace jaxdnn::norms {

ffi::Error NormFwdCuda(const NormFwdArgs& p, cudaStream_t stream);
ffi::Error NormBwdCuda(const NormBwdArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::norms
