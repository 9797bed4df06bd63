// The rules the sm90 data and weight gradients share: a problem.h geometry
// posed as CUTLASS's forward problem (GradProblem), or the reason it cannot
// be. Nothing here depends on the batch (the launchers cut batches past
// CUTLASS's int32 extents), so a refusal for one batch is one for all.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>

#include "conv/problem.h"
#include "conv/sm90/conv_grad_sm90_plan.h"

namespace jaxdnn::conv::sm90 {

inline bool FitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

// The checks on dtypes and the geometry's kind that need no sizes.
inline const char* GradKindRefusal(const ConvGeometry& g, ffi::DataType dtype, ffi::DataType dy_dtype,
                                   int act) {
  if (dtype != ffi::DataType::BF16 && dtype != ffi::DataType::F16) {
    return "conv_grad_sm90: x, w and their gradients must be bfloat16 or float16";
  }
  if (dy_dtype != dtype) return "conv_grad_sm90: dy must have x's dtype";
  if (act < 0 || act >= kNumActs) return "conv_grad_sm90: unknown activation";
  if (g.groups != 1) return "conv_grad_sm90: groups > 1 is not compiled";
  for (int k = 0; k < 3; ++k) {
    if (g.in_dilation[k] != 1) return "conv_grad_sm90: input dilation (transposed conv) is not compiled";
    if (g.stride[k] < 1 || g.k_dilation[k] < 1 || g.window[k] < 1) {
      return "conv_grad_sm90: strides, dilations and window must be positive";
    }
  }
  if (g.in_channels % 8 != 0 || g.out_channels % 8 != 0) {
    return "conv_grad_sm90: C_in and C_out must be multiples of 8 (16-byte TMA strides)";
  }
  return nullptr;
}

// True where dy is empty (no sample or no output position): the gradients
// are zero and the launchers only write those zeros.
inline bool GradEmpty(const ConvGeometry& g) { return g.batch == 0 || g.out_positions() == 0; }

// Fills *pr (batch left to the launcher) for a non-empty geometry, or says why not.
inline const char* PoseGradProblem(const ConvGeometry& g, bool half, GradProblem* pr) {
  if (!FitsInt(g.in_channels) || !FitsInt(g.out_channels) || !FitsInt(g.in_positions()) ||
      !FitsInt(g.out_positions())) {
    return "conv_grad_sm90: one sample's positions or the channels exceed int32";
  }
  if (g.taps() > 65535) return "conv_grad_sm90: more than 65535 taps";
  if (g.in_positions() == 0) return "conv_grad_sm90: an empty input dim with a nonempty output";
  pr->act[0] = 1;
  pr->act[4] = pr->flt[4] = int(g.in_channels);
  pr->flt[0] = int(g.out_channels);
  for (int k = 0; k < 3; ++k) {
    const int64_t eff = (g.window[k] - 1) * g.k_dilation[k] + 1;
    // CUTLASS derives out = 1 + (in + lo + hi - eff) / stride; the smallest
    // hi >= 0 with our out's quotient poses the same convolution (as the
    // forward's plan does).
    const int64_t hi = std::max<int64_t>(0, (g.out[k] - 1) * g.stride[k] + eff - g.in[k] - g.pad_lo[k]);
    const int64_t span = g.in[k] + g.pad_lo[k] + hi - eff;
    if (g.pad_lo[k] < 0 || span < 0 || 1 + span / g.stride[k] != g.out[k]) {
      return "conv_grad_sm90: negative padding is not compiled";
    }
    if (!FitsInt(g.window[k]) || !FitsInt(g.pad_lo[k]) || !FitsInt(hi) || !FitsInt(g.stride[k]) ||
        !FitsInt(g.k_dilation[k])) {
      return "conv_grad_sm90: sizes exceed int32";
    }
    pr->act[1 + k] = int(g.in[k]);
    pr->flt[1 + k] = int(g.window[k]);
    pr->lo[k] = int(g.pad_lo[k]);
    pr->hi[k] = int(hi);
    pr->stride[k] = int(g.stride[k]);
    pr->dil[k] = int(g.k_dilation[k]);
  }
  pr->half = half;
  return nullptr;
}

// Samples per CUTLASS problem: CUTLASS keeps a problem's positions (M of
// the data gradient, K of the weight gradient) in int32.
inline int64_t MaxSamplesPerProblem(const ConvGeometry& g) {
  return std::max<int64_t>(1, INT_MAX / std::max(g.in_positions(), g.out_positions()));
}

}  // namespace jaxdnn::conv::sm90
