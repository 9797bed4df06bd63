// The 1x1 forward GEMM's plan (the problem in CUTLASS's GEMM terms) and the
// per-configuration entry points the tile translation units define
// (conv1x1_gemm_sm90_n128.cu, conv1x1_gemm_sm90_n256.cu: one CUTLASS kernel
// each per dtype, compiled apart so the build runs them in parallel).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/launch_status.h"
#include "conv/sm90/conv_sm90_workspace.h"

namespace jaxdnn::conv::sm90 {

struct GemmPlan {
  int m = 0, n = 0, k = 0;  // N * positions, C_out, C_in
  float clamp_lo = 0.0f, clamp_hi = 0.0f;
  size_t bias_bytes = 0;  // the float32 bias's room in the workspace
  bool empty = false;     // nothing to write
  bool half = false;      // float16 (else bfloat16)
  int tile_n = 128;       // the CTA tile's C_out width: 128 or 256
};

// Defined for kHalf in {false, true} and kTileN in {128, 256}.
template <bool kHalf, int kTileN>
size_t GemmCutlassWorkspace(const GemmPlan& pl);
template <bool kHalf, int kTileN>
bool GemmImplementable(const GemmPlan& pl, float alpha, float beta);
// The CUTLASS kernel: x [M, K], w [K, N] (N contiguous), bias float32 or
// null, c the residual [M, N] (or y when beta is 0: never read), d = y;
// sm_count the persistent grid's SMs on `device`.
template <bool kHalf, int kTileN>
LaunchStatus GemmLaunch(const GemmPlan& pl, float alpha, float beta, const void* x, const void* w,
                        const float* bias, const void* c, void* d, void* cutlass_workspace, int device,
                        int sm_count, cudaStream_t stream);

}  // namespace jaxdnn::conv::sm90
