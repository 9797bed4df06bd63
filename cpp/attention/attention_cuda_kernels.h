// CUDA attention launchers (host side), one per direction.
#pragma once

#include <cuda_runtime.h>

#include "attention/attention_problem.h"

namespace jaxdnn::attention {

// Head dims the CUDA kernels are compiled for; the Python side pads others up.
inline bool CudaHeadDimSupported(int64_t d) { return d == 64 || d == 128 || d == 256; }

cudaError_t AttentionFwdCuda(const AttnFwdArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::attention
