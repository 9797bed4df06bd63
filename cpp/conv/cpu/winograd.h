// Winograd's minimal filtering F(2x2, 3x3) for the CPU convolution forward
// (algorithm="winograd"): each 2x2 block of outputs from a 4x4 input tile,
// the 9-tap window's products replaced by 16 per tile and channel pair,
// done as 16 GEMMs [tiles x C_in/g] x [C_in/g x C_out/g] a group over
// transformed inputs and weights (Lavin and Gray, 2016). 2.25x fewer multiplications than the
// direct sum; the transforms add and subtract up to 4 inputs, so float32
// rounding grows by a few units in the last place (docs/perf/conv.md). An
// infinite input becomes NaN in its tiles' outputs (inf - inf in the
// transforms), where the direct sum gives +-inf: cuDNN's Winograd does the
// same.
#pragma once

#include "common/ffi_util.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

// The problems it serves: a 3x3 window over the last two spatial dims (a
// depth window of 1 in 3D), stride 1, no input or kernel dilation; any
// groups (a vmapped weight folds into them).
bool WinogradServes(const ConvGeometry& g);

ffi::Error WinogradFwdCpu(const ConvFwdArgs& p, ffi::ThreadPool* pool);

}  // namespace jaxdnn::conv
