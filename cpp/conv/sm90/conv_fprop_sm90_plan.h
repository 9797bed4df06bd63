// The sm90 forward convolution's plan (the problem in CUTLASS's terms) and
// the per-configuration entry points the tile translation units define
// (conv_fprop_sm90_n64.cu, conv_fprop_sm90_n128.cu: one CUTLASS kernel
// each per dtype, compiled apart so the build runs them in parallel).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/launch_status.h"
#include "conv/sm90/conv_sm90_workspace.h"

namespace jaxdnn::conv::sm90 {

struct Plan {
  int act[5], flt[5];  // [N, D, H, W, C_in], [C_out, T, R, S, C_in]
  int lo[3], hi[3], stride[3], dil[3];
  float clamp_lo, clamp_hi;
  size_t weight_bytes = 0, bias_bytes = 0;
  bool empty = false;  // nothing to write
  bool half = false;   // float16 (else bfloat16)
  int tile_n = 128;    // the CTA tile's C_out width: 64 or 128
};

// Defined for kHalf in {false, true} and kTileN in {64, 128}.
template <bool kHalf, int kTileN>
size_t CutlassWorkspace(const Plan& pl);
template <bool kHalf, int kTileN>
bool Implementable(const Plan& pl, float alpha, float beta);
// The CUTLASS kernel on prepared operands: wt the K-major weights, bias
// float32 or null, c the residual (or y when beta is 0: never read).
template <bool kHalf, int kTileN>
LaunchStatus Launch(const Plan& pl, float alpha, float beta, const void* x, const void* wt, const float* bias,
                    const void* c, void* d, void* cutlass_workspace, cudaStream_t stream);

}  // namespace jaxdnn::conv::sm90
