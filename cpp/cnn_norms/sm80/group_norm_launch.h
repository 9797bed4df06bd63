// The CUDA launchers of the group norm (plans in common/rows_plan.h).
#pragma once

#include <cuda_runtime_api.h>

#include "cnn_norms/problem.h"
#include "common/launch_status.h"

namespace jaxdnn::cnn_norms {

// The workspace (float32 elements): per-channel partials of `chunks` chunks
// of positions [N, chunks, 2, C], then the backward's group sums [N, G, 2].
struct GnWorkspace {
  int64_t chunks, partials, group_sums;
};
GnWorkspace GroupNormWorkspace(const GroupShape& s, int64_t itemsize);

LaunchStatus GroupNormFwdCuda(const GroupNormFwdArgs& p, float* workspace, int64_t workspace_elems,
                              cudaStream_t stream);
LaunchStatus GroupNormBwdCuda(const GroupNormBwdArgs& p, float* workspace, int64_t workspace_elems,
                              cudaStream_t stream);

}  // namespace jaxdnn::cnn_norms
