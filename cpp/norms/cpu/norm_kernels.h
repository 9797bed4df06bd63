// CPU LayerNorm / RMSNorm kernels (float32 statistics for every dtype).
#pragma once

#include "norms/problem.h"

namespace jaxdnn::norms {

// Rows are spread over `pool` (XLA's intra-op threads; null: one thread).
ffi::Error NormFwdCpu(const NormFwdArgs& p, ffi::ThreadPool* pool);
ffi::Error NormBwdCpu(const NormBwdArgs& p, ffi::ThreadPool* pool);

}  // namespace jaxdnn::norms
