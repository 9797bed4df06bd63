// The register-resident (Hopper cluster) softmax and log-softmax kernels, for
// rows a RowSplit admits.
#pragma once

#include <cuda_runtime_api.h>

#include "softmax/problem.h"
#include "softmax/sm90/row_split.h"

namespace jaxdnn::softmax {

cudaError_t SoftmaxFwdVecCuda(const SoftmaxFwdArgs& p, const RowSplit& s, cudaStream_t stream);
// Rows split over a cluster (s.cluster > 1), without `where`: staged through
// shared memory by bulk copies two rows ahead, for shares StagedFits admits.
// recompute: the forward takes exp twice from shared memory (see
// softmax_fwd_staged.cu) instead of holding the row in registers.
cudaError_t SoftmaxFwdStagedCuda(const SoftmaxFwdArgs& p, const RowSplit& s, bool recompute,
                                 cudaStream_t stream);
cudaError_t SoftmaxBwdStagedCuda(const SoftmaxBwdArgs& p, const RowSplit& s, cudaStream_t stream);
cudaError_t SoftmaxBwdVecCuda(const SoftmaxBwdArgs& p, const RowSplit& s, cudaStream_t stream);

}  // namespace jaxdnn::softmax
