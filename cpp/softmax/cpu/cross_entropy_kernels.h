// CPU cross-entropy kernels (formulas in softmax/problem.h): float32 rows,
// column-order sums, rows over XLA's intra-op threads.
#pragma once

#include "softmax/problem.h"

namespace jaxdnn::softmax {

ffi::Error CrossEntropyFwdCpu(const CrossEntropyFwdArgs& p, ffi::ThreadPool* pool);
ffi::Error CrossEntropyBwdCpu(const CrossEntropyBwdArgs& p, ffi::ThreadPool* pool);
ffi::Error SoftCrossEntropyFwdCpu(const SoftCrossEntropyFwdArgs& p, ffi::ThreadPool* pool);
ffi::Error SoftCrossEntropyBwdCpu(const SoftCrossEntropyBwdArgs& p, ffi::ThreadPool* pool);

}  // namespace jaxdnn::softmax
