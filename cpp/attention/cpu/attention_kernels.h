// CPU attention kernels: blocked online softmax, O(N) memory, every feature.
#pragma once

#include "attention/problem.h"

namespace jaxdnn::attention {

// Work is spread over `pool` (XLA's intra-op threads; null: one thread) in
// items with disjoint outputs, so results do not depend on the threads.
ffi::Error AttentionFwdCpu(const AttnFwdArgs& p, ffi::ThreadPool* pool);
ffi::Error AttentionBwdCpu(const AttnBwdArgs& p, ffi::ThreadPool* pool);

}  // namespace jaxdnn::attention
