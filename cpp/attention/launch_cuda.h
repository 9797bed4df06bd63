// CUDA attention launchers (host side), one per direction.
#pragma once

#include <cuda_runtime.h>

#include "attention/problem.h"
#include "common/launch_status.h"

namespace jaxdnn::attention {

// Head dims the CUDA kernels are compiled for; the Python side pads others up.
inline bool CudaHeadDimSupported(int64_t d) { return d == 64 || d == 128 || d == 256; }

// Whether dbias needs a full [batch, heads, q_len, kv_len] float32 staging
// area (the bias broadcasts over some dim) before its fixed-order reduction.
inline bool DbiasNeedsStaging(const Broadcast4& bias, const AttnShape& s) {
  return bias.dims[0] != s.batch || bias.dims[1] != s.heads || bias.dims[2] != s.q_len ||
         bias.dims[3] != s.kv_len;
}

LaunchStatus AttentionFwdCuda(const AttnFwdArgs& p, cudaStream_t stream);
LaunchStatus AttentionBwdCuda(const AttnBwdArgs& p, cudaStream_t stream);

// The backward AttentionBwdCuda runs for p: the fused Hopper kernel, the
// two-kernel Hopper one, the sm80 mma.sync one, or none (zeros: nothing
// attends).
enum class BwdPath { kSm90Fused, kSm90, kSm80, kZeros };
BwdPath AttentionBwdPath(const AttnBwdArgs& p);

}  // namespace jaxdnn::attention
