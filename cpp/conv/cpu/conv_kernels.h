// CPU kernels of convolution (formulas in conv/problem.h): direct
// convolution over the taps, float32 accumulation, blocked so the innermost
// loop runs over contiguous channels.
#pragma once

#include "conv/problem.h"

namespace jaxdnn::conv {

ffi::Error ConvFwdCpu(const ConvFwdArgs& p, ffi::ThreadPool* pool);
ffi::Error ConvDgradCpu(const ConvDgradArgs& p, ffi::ThreadPool* pool);
ffi::Error ConvWgradCpu(const ConvWgradArgs& p, ffi::ThreadPool* pool);

}  // namespace jaxdnn::conv
