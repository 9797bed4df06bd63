// The CUDA launchers of pooling (plans in common/rows_plan.h).
#pragma once

#include <cuda_runtime_api.h>

#include "common/launch_status.h"
#include "pooling/problem.h"

namespace jaxdnn::pooling {

LaunchStatus PoolFwdCuda(const PoolFwdArgs& p, cudaStream_t stream);
LaunchStatus PoolBwdCuda(const PoolBwdArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::pooling
