// Winograd's minimal filtering F(M x M, 3x3) for the CPU convolution
// forward (algorithm="winograd"): each M x M block of outputs from an
// (M + 2)^2 input tile, done as (M + 2)^2 GEMMs [tiles x C_in/g] x
// [C_in/g x C_out/g] a group over transformed inputs and weights (Lavin and
// Gray, 2016). F(4x4, 3x3) takes 36 products for 16 outputs (4x fewer
// multiplications than the direct sum), F(2x2, 3x3) 16 for 4 (2.25x). The
// transforms mix up to 6 inputs with weights up to 8 (F(4x4)), so float32
// rounding grows by a few units in the last place more than F(2x2)'s
// (docs/perf/conv.md). An infinite input becomes NaN in its tiles' outputs
// (inf - inf in the transforms), where the direct sum gives +-inf: cuDNN's
// Winograd does the same.
#pragma once

#include "common/ffi_util.h"
#include "conv/problem.h"
#include "conv/winograd_math.h"

namespace jaxdnn::conv {

// The output tile side it uses: 4 where the output has at least 4 rows and
// 4 columns, 2 below that (a 4x4 tile would be mostly padding).
int WinogradOutputTile(const ConvGeometry& g);

ffi::Error WinogradFwdCpu(const ConvFwdArgs& p, ffi::ThreadPool* pool);

}  // namespace jaxdnn::conv
