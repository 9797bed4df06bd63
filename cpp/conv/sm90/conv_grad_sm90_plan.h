// The sm90 gradient convolutions' problem in CUTLASS's terms, and the
// per-configuration entry points their tile translation units define
// (conv_dgrad_sm90_n*.cu, conv_wgrad_sm90_m*.cu: one CUTLASS kernel each per
// dtype, compiled apart so the build runs them in parallel).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/launch_status.h"

namespace jaxdnn::conv::sm90 {

// The forward problem both gradients are posed on (CUTLASS derives dy's
// shape from it): x [N, D, H, W, C_in], filter [C_out, T, R, S, C_in].
struct GradProblem {
  int act[5], flt[5];
  int lo[3], hi[3], stride[3], dil[3];
  bool half = false;  // float16 (else bfloat16)
  int tile = 128;     // dgrad: the CTA tile's C_in width; wgrad: its C_out height (64 or 128)
};

// Parts of the weight gradient one launch runs (their CUTLASS parameters,
// about 1 KB each, must fit the kernel's parameter space).
constexpr int kWgradPartsPerLaunch = 28;

// The weight gradient's problem cut along the batch: part p covers samples
// [p * per_part, min(N, (p + 1) * per_part)), each writing its own float32
// partial [C_out, taps, C_in]; x and dz advance by x_step / dz_step elements
// per sample.
struct WgradParts {
  int count = 1, per_part = 1;
  int64_t batch = 0, x_step = 0, dz_step = 0, partial_elems = 0;
};

// Defined for kHalf in {false, true} and kTile in {64, 128}.
template <bool kHalf, int kTile>
bool DgradImplementable(const GradProblem& pr);
// dx = alpha * dgrad(dz, wt): dz [N, Z, P, Q, C_out], wt the K-major filter
// [C_out, taps, C_in], dx [N, D, H, W, C_in], all of the problem's dtype.
template <bool kHalf, int kTile>
LaunchStatus DgradLaunch(const GradProblem& pr, float alpha, const void* dz, const void* wt, void* dx,
                         cudaStream_t stream);

template <bool kHalf, int kTile>
bool WgradImplementable(const GradProblem& pr);
// partials[p] = wgrad(x, dz) over part p's samples, float32 [C_out, taps, C_in].
template <bool kHalf, int kTile>
LaunchStatus WgradLaunch(const GradProblem& pr, const WgradParts& parts, const void* x, const void* dz,
                         float* partials, cudaStream_t stream);

}  // namespace jaxdnn::conv::sm90
