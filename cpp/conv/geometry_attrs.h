// The convolution geometry and epilogue from the FFI attributes (the
// geometry as int64 arrays of 3), checked, and the handlers' binding.
#pragma once

#include "common/activation.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

using Dims = ffi::Span<const int64_t>;

struct ConvAttrs {
  int64_t in_channels, out_channels, groups;
  Dims in, out, window, stride, in_dilation, k_dilation, pad_lo;
  int32_t act;
  float act_param, alpha, beta;
  int32_t saved, has_bias, has_residual, algorithm;
};

inline ffi::ErrorOr<ConvGeometry> GeometryOf(int64_t batch, const ConvAttrs& a) {
  constexpr const char* kOp = "jaxdnn convolution";
  const Dims all[] = {a.in, a.out, a.window, a.stride, a.in_dilation, a.k_dilation, a.pad_lo};
  for (const Dims& d : all) {
    if (d.size() != 3) return ffi::Unexpected(InvalidArg(kOp, "geometry attributes must have 3 dims"));
  }
  ConvGeometry g;
  g.batch = batch;
  g.in_channels = a.in_channels;
  g.out_channels = a.out_channels;
  g.groups = a.groups;
  g.algorithm = a.algorithm;
  if (a.algorithm < kAlgoAuto || a.algorithm > kAlgoWinograd) {
    return ffi::Unexpected(InvalidArg(kOp, "unknown algorithm code"));
  }
  if (g.groups < 1 || g.in_channels < 1 || g.out_channels < 1 || g.in_channels % g.groups ||
      g.out_channels % g.groups) {
    return ffi::Unexpected(InvalidArg(kOp, "channels must be positive multiples of groups"));
  }
  for (int k = 0; k < 3; ++k) {
    g.in[k] = a.in[k];
    g.out[k] = a.out[k];
    g.window[k] = a.window[k];
    g.stride[k] = a.stride[k];
    g.in_dilation[k] = a.in_dilation[k];
    g.k_dilation[k] = a.k_dilation[k];
    g.pad_lo[k] = a.pad_lo[k];
    if (g.window[k] < 1 || g.stride[k] < 1 || g.in_dilation[k] < 1 || g.k_dilation[k] < 1 || g.in[k] < 0 ||
        g.out[k] < 0) {
      return ffi::Unexpected(InvalidArg(kOp, "window, strides and dilations must be positive, sizes >= 0"));
    }
  }
  return g;
}

inline ffi::ErrorOr<Epilogue> EpilogueOf(const ConvAttrs& a) {
  Epilogue e;
  e.act = a.act;
  e.act_param = a.act_param;
  e.alpha = a.alpha;
  e.beta = a.beta;
  e.saved = a.saved;
  e.has_bias = a.has_bias != 0;
  e.has_residual = a.has_residual != 0;
  if (a.act < 0 || a.act >= kNumActs) {
    return ffi::Unexpected(InvalidArg("jaxdnn convolution", "unknown activation code"));
  }
  if (a.saved < kSaveNothing || a.saved > kSavePreact || (a.act == 0) != (a.saved == kSaveNothing)) {
    return ffi::Unexpected(InvalidArg("jaxdnn convolution", "saved must match the activation"));
  }
  return e;
}

// The batch of a call's first operand (x or dy, [batch, positions * channels]).
inline int64_t BatchOf(ffi::RemainingArgs args) {
  auto x = args.get<ffi::AnyBuffer>(0);
  return x.has_value() && x->dimensions().size() == 2 ? x->dimensions()[0] : 0;
}

}  // namespace jaxdnn::conv

// The convolution handlers' binding, on the platform context CONTEXT; the
// handler takes (context, args, rets, ConvAttrs fields in order).
#define JAXDNN_CONV_BIND(CONTEXT)                \
  ::xla::ffi::Ffi::Bind()                        \
      .Ctx<CONTEXT>()                            \
      .RemainingArgs()                           \
      .RemainingRets()                           \
      .Attr<int64_t>("in_channels")              \
      .Attr<int64_t>("out_channels")             \
      .Attr<int64_t>("groups")                   \
      .Attr<::jaxdnn::conv::Dims>("in_dims")     \
      .Attr<::jaxdnn::conv::Dims>("out_dims")    \
      .Attr<::jaxdnn::conv::Dims>("window")      \
      .Attr<::jaxdnn::conv::Dims>("strides")     \
      .Attr<::jaxdnn::conv::Dims>("in_dilation") \
      .Attr<::jaxdnn::conv::Dims>("k_dilation")  \
      .Attr<::jaxdnn::conv::Dims>("pad_lo")      \
      .Attr<int32_t>("act")                      \
      .Attr<float>("act_param")                  \
      .Attr<float>("alpha")                      \
      .Attr<float>("beta")                       \
      .Attr<int32_t>("saved")                    \
      .Attr<int32_t>("has_bias")                 \
      .Attr<int32_t>("has_residual")             \
      .Attr<int32_t>("algorithm")
