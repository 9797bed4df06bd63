// CPU kernels of the group norm (formulas in cnn_norms/problem.h).
#pragma once

#include "cnn_norms/problem.h"

namespace jaxdnn::cnn_norms {

ffi::Error GroupNormFwdCpu(const GroupNormFwdArgs& p, ffi::ThreadPool* pool);
ffi::Error GroupNormBwdCpu(const GroupNormBwdArgs& p, ffi::ThreadPool* pool);

}  // namespace jaxdnn::cnn_norms
