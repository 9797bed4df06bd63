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

}  // namespace jaxdnn::pooling
