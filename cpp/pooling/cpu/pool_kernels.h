// CPU kernels of pooling (formulas in pooling/problem.h).
#pragma once

#include "pooling/problem.h"

namespace jaxdnn::pooling {

ffi::Error PoolFwdCpu(const PoolFwdArgs& p, ffi::ThreadPool* pool);
ffi::Error PoolBwdCpu(const PoolBwdArgs& p, ffi::ThreadPool* pool);

}  // namespace jaxdnn::pooling
