// CUDA launchers of the softmax family (plain CUDA, sm_80 and up).
#pragma once

#include <cuda_runtime_api.h>

#include "softmax/problem.h"

namespace jaxdnn::softmax {

cudaError_t SoftmaxFwdCuda(const SoftmaxFwdArgs& p, cudaStream_t stream);
cudaError_t SoftmaxBwdCuda(const SoftmaxBwdArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::softmax
