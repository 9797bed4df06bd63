// CPU LayerNorm / RMSNorm kernels (float32 statistics for every dtype).
#pragma once

#include "norms/norm_problem.h"

namespace jaxdnn::norms {

ffi::Error NormFwdCpu(const NormFwdArgs& p);
ffi::Error NormBwdCpu(const NormBwdArgs& p);

}  // namespace jaxdnn::norms
