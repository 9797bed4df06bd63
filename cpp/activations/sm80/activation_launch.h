// CUDA launchers of the activations family (plans in activations/plan.h).
#pragma once

#include <cuda_runtime_api.h>

#include "activations/problem.h"
#include "common/launch_status.h"

namespace jaxdnn::activations {

LaunchStatus BiasActFwdCuda(const BiasActFwdArgs& p, cudaStream_t stream);
LaunchStatus BiasActBwdCuda(const BiasActBwdArgs& p, cudaStream_t stream);
LaunchStatus GluFwdCuda(const GluFwdArgs& p, cudaStream_t stream);
LaunchStatus GluBwdCuda(const GluBwdArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::activations
