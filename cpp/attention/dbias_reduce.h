// A broadcast bias's gradient: the backward kernels store dS in a full-size
// float32 [batch, heads, q_len, kv_len] staging area, which one pass sums
// into the bias's shape in a fixed order (deterministic). Shared by the sm80
// and sm90 backwards.
#pragma once

#include <cuda_runtime.h>

#include "attention/problem.h"

namespace jaxdnn::attention {

// Whether dbias needs the staging area (the bias broadcasts over some dim).
inline bool DbiasNeedsStaging(const Broadcast4& bias, const AttnShape& s) {
  return bias.dims[0] != s.batch || bias.dims[1] != s.heads || bias.dims[2] != s.q_len ||
         bias.dims[3] != s.kv_len;
}

// dbias[bias's shape] = the sum of `full` over the broadcast dims.
cudaError_t LaunchDbiasReduce(const float* full, float* dbias, const Broadcast4& bias, const AttnShape& s,
                              cudaStream_t stream);

}  // namespace jaxdnn::attention
