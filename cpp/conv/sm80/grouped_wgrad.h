// The weight gradient of a grouped convolution (the forward's groups,
// grouped_fwd.h) on tensor cores: dw[tap, ci, co] = alpha * sum over
// positions of x[window row] * dz, the GEMM's K dimension the output
// positions. A CTA a group and a slice of the positions; each warp stages
// 16 positions' window rows of x and their dz and multiplies them through
// transposing ldmatrix loads, summing the whole group's window in
// registers; the CTA's warps are added in order into one float32 partial
// per (group, slice), and a second kernel adds the slices in order (and the
// bias gradient's column sums): deterministic.
//
// Serves dz of x's dtype (bfloat16, float16) given as dy with no activation
// (the caller applies the activation's derivative: jaxdnn/conv/api.py),
// up to 20 m16n8 accumulator tiles a group (3x3 windows: 8 channels in and
// up to 32 out, 16 in and up to 16 out, 32 in and 8 out).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/launch_status.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

// Why GroupedWgradCuda would refuse p (the batch does not matter), or nullptr.
const char* GroupedWgradRefusal(const ConvWgradArgs& p);

// The slices' float32 partials (and the bias gradient's).
size_t GroupedWgradWorkspace(const ConvWgradArgs& p);

LaunchStatus GroupedWgradCuda(const ConvWgradArgs& p, cudaStream_t stream);

// The tiled kernel (grouped_tiled_wgrad.cu: a CTA a channel slice, each
// tile's input window staged once), which GroupedWgradCuda runs where it
// serves: no input dilation, up to 40 (group, 16 window rows) units a slice,
// a tile's window and dz rows in shared memory.
bool GroupedTiledWgradServes(const ConvWgradArgs& p);
size_t GroupedTiledWgradWorkspace(const ConvWgradArgs& p);
LaunchStatus GroupedTiledWgradCuda(const ConvWgradArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::conv
