// Which way the CUDA convolution runs by default (algorithm=None) where its
// sm90 kernels serve a problem: on them, or on XLA's convolution (cuDNN)
// where that measured faster. The rules are the H100 tables of
// docs/perf/conv.md ("Heuristics"): the sm90 forward wins on strided layers
// and on fewer than 2^17 output positions with C_out a multiple of 128, and
// loses on the large 64-channel, 320-channel and 1-D layers; the sm90
// gradients lost on every stride-1 ResNet-50 layer measured, so there they
// run only when asked for (algorithm="implicit_gemm").
// JAXDNN_CONV_HEURISTIC=sm90 or xla overrides both (A/Bs). Among the sm90
// forwards, PreferConv1x1Gemm picks the 1x1 persistent GEMM over the
// implicit-GEMM convolution for the pointwise layers.
#pragma once

#include <cstdint>
#include <string>

#include "common/switches.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

// A strided 1x1 window (ResNet's downsampling shortcuts): XLA's strided
// convolution beat the sm90 implicit GEMM (0.71-0.80x) and the 1x1 GEMM on
// the input's strided view (0.59-0.79x forward, 0.73-0.88x fwd+bwd) on all
// three ResNet-50 layers on an H200 (docs/perf/conv.md).
inline bool StridedPointwise(const ConvGeometry& g) {
  return g.taps() == 1 && (g.stride[0] > 1 || g.stride[1] > 1 || g.stride[2] > 1);
}

// True where the sm90 forward is the default for g (a problem it serves).
inline bool PreferSm90Forward(const ConvGeometry& g) {
  const std::string forced = SwitchText(Switch::kConvHeuristic);
  if (forced != "auto") return forced == "sm90";
  if (StridedPointwise(g)) return false;
  const bool strided = g.stride[0] > 1 || g.stride[1] > 1 || g.stride[2] > 1;
  const int64_t positions = g.batch * g.out_positions();
  return strided || (positions <= (int64_t(1) << 17) && g.out_channels % 128 == 0);
}

// True where a sm90 forward of g that the 1x1 persistent GEMM serves
// (conv/sm90/conv1x1_gemm_sm90.h: 1x1, stride 1, no padding or dilation,
// groups 1) runs on it rather than on the implicit-GEMM convolution: by
// default everywhere it serves (1.2-2.1x the implicit GEMM on all of
// ResNet-50's 1x1 layers, plain and with bias+residual+ReLU, on an H200;
// docs/perf/conv.md), so such forwards leave XLA's convolution too.
// JAXDNN_CONV_1X1_GEMM=0 turns it off, =128/256 forces a tile width.
inline bool PreferConv1x1Gemm(const ConvGeometry& /*g*/) {
  const std::string forced = SwitchText(Switch::kConv1x1Gemm);
  if (forced != "auto") return forced != "0";
  return true;
}

// True where the sm90 data and weight gradients are the default: strided
// layers (their data gradient runs on XLA anyway; the weight gradient won:
// ResNet-50's 3x3 s2 56x56 128->128 fwd+bwd 362 us against 433 with XLA's
// gradients and 404 all-XLA).
inline bool PreferSm90Gradients(const ConvGeometry& g) {
  const std::string forced = SwitchText(Switch::kConvHeuristic);
  if (forced != "auto") return forced == "sm90";
  if (StridedPointwise(g)) return false;
  return g.stride[0] > 1 || g.stride[1] > 1 || g.stride[2] > 1;
}

}  // namespace jaxdnn::conv
