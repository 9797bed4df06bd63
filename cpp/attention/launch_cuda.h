// CUDA attention launchers (host side), one per direction.
#pragma once

#include <cuda_runtime.h>

#include "attention/dbias_reduce.h"
#include "attention/problem.h"
#include "common/launch_status.h"

namespace jaxdnn::attention {

// Head dims the CUDA kernels are compiled for; the Python side pads others up.
inline bool CudaHeadDimSupported(int64_t d) { return d == 64 || d == 128 || d == 256; }

LaunchStatus AttentionFwdCuda(const AttnFwdArgs& p, cudaStream_t stream);
LaunchStatus AttentionBwdCuda(const AttnBwdArgs& p, cudaStream_t stream);

// The backward AttentionBwdCuda runs for p: the fused Hopper kernel, the
// two-kernel Hopper one, the sm80 mma.sync one, or none (zeros: nothing
// attends).
enum class BwdPath { kSm90Fused, kSm90, kSm80, kZeros };
BwdPath AttentionBwdPath(const AttnBwdArgs& p);

}  // namespace jaxdnn::attention
