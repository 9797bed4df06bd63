// The pooling geometry from the FFI attributes (int64 arrays of 3).
#pragma once

#include "pooling/problem.h"

namespace jaxdnn::pooling {

using Dims = ffi::Span<const int64_t>;

inline ffi::ErrorOr<PoolGeometry> GeometryOf(int64_t batch, int64_t channels, Dims in, Dims out, Dims window,
                                             Dims stride, Dims dilation, Dims pad_lo, int32_t max,
                                             int32_t count_include_pad, int32_t adaptive) {
  Dims all[] = {in, out, window, stride, dilation, pad_lo};
  for (const Dims& d : all) {
    if (d.size() != 3)
      return ffi::Unexpected(InvalidArg("jaxdnn pooling", "geometry attributes must have 3 dims"));
  }
  PoolGeometry g;
  g.batch = batch;
  g.channels = channels;
  for (int k = 0; k < 3; ++k) {
    g.in[k] = in[k];
    g.out[k] = out[k];
    g.window[k] = window[k];
    g.stride[k] = stride[k];
    g.dilation[k] = dilation[k];
    g.pad_lo[k] = pad_lo[k];
    if (window[k] < 1 || stride[k] < 1 || dilation[k] < 1 || in[k] < 0 || out[k] < 0 || pad_lo[k] < 0) {
      return ffi::Unexpected(InvalidArg(
          "jaxdnn pooling", "window, strides and dilation must be positive, sizes and padding >= 0"));
    }
  }
  g.max = max != 0;
  g.count_include_pad = count_include_pad != 0;
  g.adaptive = adaptive != 0;
  return g;
}

// The batch of a call's first operand (x or dy, [batch, positions * channels]).
inline int64_t BatchOf(ffi::RemainingArgs args) {
  auto x = args.get<ffi::AnyBuffer>(0);
  return x.has_value() && x->dimensions().size() == 2 ? x->dimensions()[0] : 0;
}

}  // namespace jaxdnn::pooling

// The pooling handlers' binding, on the platform context CONTEXT.
#define JAXDNN_POOL_BIND(CONTEXT)                \
  ::xla::ffi::Ffi::Bind()                        \
      .Ctx<CONTEXT>()                            \
      .RemainingArgs()                           \
      .RemainingRets()                           \
      .Attr<int64_t>("channels")                 \
      .Attr<::jaxdnn::pooling::Dims>("in_dims")  \
      .Attr<::jaxdnn::pooling::Dims>("out_dims") \
      .Attr<::jaxdnn::pooling::Dims>("window")   \
      .Attr<::jaxdnn::pooling::Dims>("strides")  \
      .Attr<::jaxdnn::pooling::Dims>("dilation") \
      .Attr<::jaxdnn::pooling::Dims>("pad_lo")   \
      .Attr<int32_t>("max")                      \
      .Attr<int32_t>("count_include_pad")        \
      .Attr<int32_t>("adaptive")

// The forward's binding: the pooling attributes and with_index (max: write the
// int32 index too; the backward's residual, or return_indices).
#define JAXDNN_POOL_FWD_BIND(CONTEXT) JAXDNN_POOL_BIND(CONTEXT).Attr<int32_t>("with_index")
