// Weight gradient of the convolution on Hopper (sm_90a) with CUTLASS 3's
// implicit-GEMM wgrad kernel (dz tiled, x through the TMA's im2col mode,
// WGMMA, float32 accumulation): dw[tap, ci, co] = alpha * sum over samples
// and output positions of x[.., i(o, tap), ci] dz[.., o, co] with dz =
// act'(saved) * dy, and d bias = the column sums of dz (problem.h).
//
// Deterministic: the batch is cut into parts (a fixed function of the shape)
// that each write a float32 partial, summed in part order by the kernel
// that also transposes CUTLASS's [C_out, taps, C_in] into the weights'
// [taps, C_in, C_out] and rounds once; the bias gradient sums fixed row
// blocks in order. No atomics.
//
// Serves: x, dw, dy (and saved) all bfloat16 or all float16, the bias
// gradient float32, bfloat16 or float16; every activation (its derivative
// in the pre-pass); groups 1; input dilation 1; any stride and kernel
// dilation and non-negative padding CUTLASS's 3-D im2col TMA takes (per
// dim: padding <= 16, (window - 1) * dilation <= 30); C_in and C_out
// multiples of 8. The refusal never depends on the batch.
//
// Workspace: dz where an activation needs it, the parts' float32 partials,
// and the bias gradient's per-block column sums.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/launch_status.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

// Bytes of device workspace ConvWgradSm90 needs for p (0 where it refuses or
// has nothing to compute).
size_t ConvWgradSm90Workspace(const ConvWgradArgs& p);

// Why ConvWgradSm90 would refuse p, or nullptr (pointers and alignment aside).
const char* ConvWgradSm90Refusal(const ConvWgradArgs& p);

// The CTA tile's height in output channels (64 or 128) and the number of
// batch parts the plan picks for p.
int ConvWgradSm90TileM(const ConvWgradArgs& p);
int ConvWgradSm90Parts(const ConvWgradArgs& p);

// Enqueues the weight (and bias) gradient on `stream` with p.workspace
// (16-byte aligned, ConvWgradSm90Workspace(p) bytes); no allocation, no host
// synchronization.
LaunchStatus ConvWgradSm90(const ConvWgradArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::conv
