// Cross-entropy kernels on 16-byte vectors, for rows CrossEntropyVecFits
// admits (whole, aligned vectors); the warp-per-row kernels serve the rest.
#pragma once

#include <cuda_runtime_api.h>

#include "softmax/problem.h"

namespace jaxdnn::softmax {

bool CrossEntropyVecFits(int64_t rows, int64_t cols, int elem_bytes, bool aligned);
cudaError_t CrossEntropyFwdVecCuda(const CrossEntropyFwdArgs& p, cudaStream_t stream);
cudaError_t CrossEntropyBwdVecCuda(const CrossEntropyBwdArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::softmax
