// Pooling over channels-last x viewed as [N, D, H, W, C] (1D and 2D inputs
// have unit leading spatial dims), shared by the CPU and CUDA paths. Output
// position o of spatial dim k covers inputs o * stride[k] - pad_lo[k] +
// j * dilation[k], j < window[k]; positions outside the input are padding.
//   max: y = the window's maximum (NaN passes, as XLA's max); the index of its
//        first occurrence in window order (row-major over the window), as a
//        flat index over the input's spatial positions (PyTorch's
//        return_indices), -1 when the window is all padding (y = -inf);
//        backward: dx[index] += dy, in output order (jax.grad of
//        reduce_window max routes to the first maximum too).
//   avg: y = sum / count, count the window's size (count_include_pad) or its
//        positions inside the input; backward: dx += dy / count over them.
// Adaptive pooling (PyTorch's) replaces the windows: output o of dim k covers
// inputs [floor(o in / out), ceil((o + 1) in / out)) (strides, dilation and
// padding unused; `window` is the largest such span, a loop bound).
#pragma once

#include <array>
#include <cstdint>

#include "common/ffi_util.h"
#include "common/host_device.h"

namespace jaxdnn::pooling {

struct PoolGeometry {
  int64_t batch = 0, channels = 0;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, window{1, 1, 1}, stride{1, 1, 1}, dilation{1, 1, 1},
      pad_lo{0, 0, 0};
  bool max = true, count_include_pad = true, adaptive = false;
  int64_t in_positions() const { return in[0] * in[1] * in[2]; }
  int64_t out_positions() const { return out[0] * out[1] * out[2]; }
};

// The input range [first, last) output o of dim k covers, adaptive or not
// (not: the dilated positions inside it are the window's).
JAXDNN_HD void AdaptiveSpan(int64_t o, int64_t in, int64_t out, int64_t* first, int64_t* last) {
  *first = (o * in) / out;
  *last = ((o + 1) * in + out - 1) / out;
}

struct PoolFwdArgs {
  PoolGeometry g;
  ffi::DataType dtype;
  const void* x = nullptr;   // [N, in positions * C]
  void* y = nullptr;         // [N, out positions * C]
  int32_t* index = nullptr;  // max with_index: [N, out positions * C], else null
};

struct PoolBwdArgs {
  PoolGeometry g;
  ffi::DataType dtype;
  const void* dy = nullptr;
  const int32_t* index = nullptr;  // max
  void* dx = nullptr;
};

// Attributes: the geometry as int64 arrays of 3 (in, out, window, stride,
// dilation, pad_lo), channels, max, count_include_pad, adaptive; the forward
// also with_index (max only: write the index, the backward's residual or
// return_indices; the plain primal call writes y alone). Buffers:
//   forward  args x                       rets y, [index int32] (with_index)
//   backward args dy, [index] (max)       rets dx
ffi::ErrorOr<PoolFwdArgs> ReadPoolFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                          const PoolGeometry& g, bool with_index);
ffi::ErrorOr<PoolBwdArgs> ReadPoolBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                          const PoolGeometry& g);

}  // namespace jaxdnn::pooling
