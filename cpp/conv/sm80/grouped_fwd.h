// The forward of a grouped convolution (2 <= groups, 8/16/32 input channels
// and 8-32 output channels a group) on tensor cores (mma.sync, sm_80 and
// later; grouped_common.cuh): one read of x through the per-warp staged
// window rows, float32 sums, the whole epilogue (alpha, bias, beta *
// residual, activation, z saved where the backward needs it). The data
// gradient is this kernel on the transposed problem (jaxdnn/conv/api.py:
// dz convolved with the flipped, per-group transposed window).
//
// Serves: bfloat16 or float16 x and w, y and z of x's dtype or float32,
// any float bias, a residual of y's dtype, any stride, dilation and
// padding over 1-3 spatial dims. Runs where the call asked for
// algorithm="direct" only: with the tiled kernel (v4) it measured 0.60-1.21x XLA's
// grouped convolution (docs/perf/conv.md, "The tiled grouped kernels").
#pragma once

#include <cuda_runtime_api.h>

#include "common/launch_status.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

// Why GroupedFwdCuda would refuse p, or nullptr.
const char* GroupedFwdRefusal(const ConvFwdArgs& p);

// Whether the tiled kernel (grouped_tiled_fwd.cu: a CTA a channel slice,
// the tile's input window staged once) serves p's geometry: no input
// dilation, and a tile's window, weights and sums fit in shared memory.
// GroupedFwdCuda runs it where it does, the per-warp kernel elsewhere.
bool GroupedTiledFwdServes(const ConvFwdArgs& p);
LaunchStatus GroupedTiledFwdCuda(const ConvFwdArgs& p, cudaStream_t stream);

// Enqueues the forward on `stream` (no workspace, no allocation, no host
// synchronization).
LaunchStatus GroupedFwdCuda(const ConvFwdArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::conv
