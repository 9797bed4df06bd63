// CPU softmax kernels: one row at a time in float32, rows spread over XLA's
// intra-op threads; every sum runs in column order, so results do not depend
// on the number of threads.
#pragma once

#include "softmax/problem.h"

namespace jaxdnn::softmax {

ffi::Error SoftmaxFwdCpu(const SoftmaxFwdArgs& p, ffi::ThreadPool* pool);
ffi::Error SoftmaxBwdCpu(const SoftmaxBwdArgs& p, ffi::ThreadPool* pool);

}  // namespace jaxdnn::softmax
