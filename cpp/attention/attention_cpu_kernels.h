// CPU attention kernels: blocked online softmax, O(N) memory, every feature.
#pragma once

#include "attention/attention_problem.h"

namespace jaxdnn::attention {

ffi::Error AttentionFwdCpu(const AttnFwdArgs& p);
ffi::Error AttentionBwdCpu(const AttnBwdArgs& p);

}  // namespace jaxdnn::attention
