// The forward of a 1x1, stride-1 convolution on Hopper (sm_90a) as what it
// is in channels-last layout, one GEMM: y [N * positions, C_out] =
// x [N * positions, C_in] x w [C_in, C_out], on CUTLASS 3's persistent
// cooperative warp-specialized GEMM (TMA, wgmma; conv1x1_gemm_sm90_kernel.cuh)
// with the sm90 convolution's fused epilogue, the same fusion operation:
// y = clamp(alpha * acc + bias[co] + beta * residual) for the identity, relu
// and relu6 (none of which saves a pre-activation: the backward's saved
// operand is y itself, or nothing).
//
// Serves what conv_fprop_sm90.h serves, restricted to the pointwise
// geometry: x, w, y all bfloat16 or all float16 (float32 accumulation);
// window 1, stride 1, no padding, no input or kernel dilation, groups 1
// (so the output positions are the input's); C_in and C_out multiples of 8
// (16-byte TMA strides); N * positions < 2^31; bias of any float dtype;
// residual with y's dtype. Anything else is Refused with the reason. The
// weights are read in place (no transpose); a bias that is not float32 (or
// not 16-byte aligned) is widened into the workspace first.
// Which pointwise forwards run here rather than on the implicit-GEMM
// convolution is conv/heuristics.h's PreferConv1x1Gemm.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/launch_status.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

// True for a 1x1, stride-1, unpadded, undilated, ungrouped geometry (the
// convolution that is a GEMM over the positions).
bool IsPointwiseGemm(const ConvGeometry& g);

// Why Conv1x1GemmSm90 would refuse p (the geometry, shape, dtype and
// epilogue rules and CUTLASS's can_implement; not the pointers' alignment),
// or nullptr.
const char* Conv1x1GemmSm90Refusal(const ConvFwdArgs& p);

// Bytes of device workspace Conv1x1GemmSm90 needs for p (0 for a problem it
// refuses or one with nothing to compute): CUTLASS's own and room for the
// bias in float32, each 256-byte aligned.
size_t Conv1x1GemmSm90Workspace(const ConvFwdArgs& p);

// The CTA tile's width in output channels the plan picks for p (128 or 256).
int Conv1x1GemmSm90TileN(const ConvFwdArgs& p);

// Enqueues the forward on `stream`; no allocation, no host synchronization.
// workspace must hold Conv1x1GemmSm90Workspace(p) bytes, 16-byte aligned.
LaunchStatus Conv1x1GemmSm90(const ConvFwdArgs& p, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream);

}  // namespace jaxdnn::conv
