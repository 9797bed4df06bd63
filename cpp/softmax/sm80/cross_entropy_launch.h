// CUDA launchers of the cross-entropy (plain CUDA, sm_80 and up).
#pragma once

#include <cuda_runtime_api.h>

#include "softmax/problem.h"

namespace jaxdnn::softmax {

cudaError_t CrossEntropyFwdCuda(const CrossEntropyFwdArgs& p, cudaStream_t stream);
cudaError_t CrossEntropyBwdCuda(const CrossEntropyBwdArgs& p, cudaStream_t stream);
cudaError_t SoftCrossEntropyFwdCuda(const SoftCrossEntropyFwdArgs& p, cudaStream_t stream);
cudaError_t SoftCrossEntropyBwdCuda(const SoftCrossEntropyBwdArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::softmax
