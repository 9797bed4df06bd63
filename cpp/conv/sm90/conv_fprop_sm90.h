// Forward convolution on Hopper (sm_90a) with CUTLASS 3's implicit-GEMM conv
// kernel (TMA im2col loads of x, WGMMA, warp-specialized producer/consumer)
// and the epilogue y = act(alpha * conv + bias[co] + beta * residual) fused
// into it. Every problem runs as CUTLASS's 3-D conv (1-D and 2-D with unit
// leading dims), so one kernel per dtype serves all three ranks.
//
// Serves: x, w, y all bfloat16 or all float16 (float32 accumulation);
// groups 1; input dilation 1; C_in and C_out multiples of 8 (16-byte TMA
// strides); any stride, kernel dilation and non-negative padding CUTLASS's
// 3-D im2col TMA takes (per dim: padding <= 16 and (window - 1) * k_dilation
// <= min(30, 16 + high padding)); bias of any float dtype; residual with y's
// dtype; identity, relu and relu6 (one runtime clamp; none of them needs z
// saved). Anything else is Refused with the reason.
//
// The weights arrive as [taps, C_in, C_out] (C_out contiguous) but CUTLASS's
// sm90 fprop reads the filter K-major only ([C_out, taps, C_in]), so the
// launcher first transposes them into the workspace (and widens the bias to
// float32 there) with one small kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/launch_status.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

// Bytes of device workspace ConvFpropSm90 needs for p (0 for a problem it
// refuses or one with nothing to compute): CUTLASS's own, the transposed
// weights and the float32 bias, each 256-byte aligned.
size_t ConvFpropSm90Workspace(const ConvFwdArgs& p);

// Why ConvFpropSm90 would refuse p (the shape, dtype and epilogue rules and
// CUTLASS's can_implement; not the pointers' alignment), or nullptr: what the
// plan query tells Python before it picks this kernel.
const char* ConvFpropSm90Refusal(const ConvFwdArgs& p);

// The CTA tile's width in output channels the plan picks for p (64 or 128).
int ConvFpropSm90TileN(const ConvFwdArgs& p);

// Enqueues the forward on `stream`; no allocation, no host synchronization.
// workspace must hold ConvFpropSm90Workspace(p) bytes, 16-byte aligned.
LaunchStatus ConvFpropSm90(const ConvFwdArgs& p, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream);

}  // namespace jaxdnn::conv
