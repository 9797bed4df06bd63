// CPU kernels of the BatchNorm steps (formulas in cnn_norms/batch_norm.h).
#pragma once

#include "cnn_norms/batch_norm.h"

namespace jaxdnn::cnn_norms {

ffi::Error BatchNormCpu(BatchNormStep step, const BatchNormArgs& p, ffi::ThreadPool* pool);

}  // namespace jaxdnn::cnn_norms
