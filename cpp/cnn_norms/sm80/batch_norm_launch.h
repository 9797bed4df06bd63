// The CUDA launcher of BatchNorm's steps (plans in common/rows_plan.h).
#pragma once

#include <cuda_runtime_api.h>

#include "cnn_norms/batch_norm.h"
#include "common/launch_status.h"

namespace jaxdnn::cnn_norms {

LaunchStatus BatchNormCuda(BatchNormStep step, const BatchNormArgs& p, cudaStream_t stream);
// Chunks of rows of the column sums (their workspace is [chunks, 2, channels]).
int64_t BatchNormPartials(int64_t rows, int64_t channels, int64_t itemsize);

}  // namespace jaxdnn::cnn_norms
