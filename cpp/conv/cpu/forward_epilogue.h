// The CPU convolution forward's epilogue: y = act(alpha * acc + bias +
// beta * residual) in the output dtype, and z (the pre-activation) where the
// backward needs it. Shared by the direct/implicit-GEMM and Winograd paths.
#pragma once

#include <cstdint>

#include "conv/problem.h"

namespace jaxdnn::conv {

// Stores outputs base .. base + count of y (and z) from acc[0 .. count)
// (float32 sums of x * w); base is a multiple of C_out.
void StoreForwardOutputs(const ConvFwdArgs& p, int64_t base, const float* acc, int64_t count);

}  // namespace jaxdnn::conv
