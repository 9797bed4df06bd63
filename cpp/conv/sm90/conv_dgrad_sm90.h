// Data gradient of the convolution on Hopper (sm_90a) with CUTLASS 3's
// implicit-GEMM dgrad kernel (TMA im2col loads of dz with the window
// flipped, WGMMA, warp-specialized), dx = alpha * conv^T(dz), where
// dz = act'(saved) * dy (problem.h); the residual's gradient beta * dz comes
// out of the same memory-bound pre-pass that computes dz.
//
// Serves: w, dx, dy (and saved) all bfloat16 or all float16 (float32
// accumulation), the residual gradient float32, bfloat16 or float16; every
// activation (its derivative in the pre-pass); groups 1; input dilation 1;
// stride 1 in every dim (CUTLASS's sm90 dgrad has no strided mode: strided
// problems stay on XLA); C_in and C_out multiples of 8; any kernel dilation
// and non-negative padding CUTLASS's 3-D im2col TMA takes (per dim: padding
// <= 16, (window - 1) * dilation <= 30 and window - 1 - padding within the
// TMA's corner range). The refusal never depends on the batch.
//
// Workspace: the weights transposed K-major ([C_out, taps, C_in], the
// filter layout CUTLASS's dgrad reads), and dz where an activation needs it
// (without one, the GEMM reads dy itself).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/launch_status.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

// Bytes of device workspace ConvDgradSm90 needs for p (0 where it refuses or
// has nothing to compute).
size_t ConvDgradSm90Workspace(const ConvDgradArgs& p);

// Why ConvDgradSm90 would refuse p, or nullptr (pointers and alignment aside).
const char* ConvDgradSm90Refusal(const ConvDgradArgs& p);

// The CTA tile's width in input channels the plan picks for p (64 or 128).
int ConvDgradSm90TileN(const ConvDgradArgs& p);

// Enqueues the data gradient on `stream` with p.workspace (16-byte aligned,
// ConvDgradSm90Workspace(p) bytes); no allocation, no host synchronization.
LaunchStatus ConvDgradSm90(const ConvDgradArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::conv
