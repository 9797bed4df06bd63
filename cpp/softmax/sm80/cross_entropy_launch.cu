// The cross-entropy's warp-per-row CUDA kernels (formulas in
// softmax/problem.h), built like the softmax's (sm80/softmax_launch.cu): rows
// grid-strided, float32, fixed-order warp reductions. The forward reads each
// row once (online max and sum) and writes two floats per row; the backward
// reads it once and writes dlogits. They serve the rows the vector kernels
// (sm90/cross_entropy_vec.cu) do not: widths that are not whole 16-byte
// vectors and unaligned views.
#include <cmath>

#include "common/cuda_vec.cuh"
#include "softmax/sm80/warp_rows.cuh"
#include "softmax/sm80/cross_entropy_launch.h"
#include "softmax/sm90/cross_entropy_vec.h"

namespace jaxdnn::softmax {
namespace {

template <typename T>
__global__ void __launch_bounds__(32 * kWarps) CrossEntropyFwdKernel(CrossEntropyFwdArgs p) {
  using V = Vec16<T>;
  const int lane = threadIdx.x & 31;
  const int64_t cols = p.shape.cols;
  const T* x = static_cast<const T*>(p.logits);
  for (int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); row < p.shape.rows;
       row += int64_t(gridDim.x) * kWarps) {
    const int64_t off = row * cols;
    float m = -INFINITY, s = 0.f, total = 0.f;
    for (int64_t j = lane; j < cols; j += 32) {
      const float v = V::Load1(x + off + j);
      total += v;
      if (v == -INFINITY) continue;  // adds exp(-inf - max) = 0
      if (v > m) {
        s = s * __expf(m - v) + 1.f;
        m = v;
      } else {
        s += __expf(v - m);  // NaN v: NaN
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
      const float mm = fmaxf(m, m2);
      s = (s == 0.f ? 0.f : s * __expf(m - mm)) + (s2 == 0.f ? 0.f : s2 * __expf(m2 - mm));
      m = mm;
      total += __shfl_xor_sync(0xffffffffu, total, o);
    }
    if (m == INFINITY || m == -INFINITY) s = NAN;  // exp(inf - inf), or every logit -inf
    if (lane == 0) {                               // the row's two floats
      const float lse = m + __logf(s);
      p.lse[row] = lse;
      const int32_t y = p.labels[row];
      switch (KindOf(y, cols, p.has_ignore, p.ignore_index)) {
        case LabelKind::kIgnored: p.loss[row] = 0.f; break;
        case LabelKind::kInvalid: p.loss[row] = NAN; break;
        case LabelKind::kValid:
          p.loss[row] = lse - (1.f - p.smoothing) * V::Load1(x + off + y) -
                        (p.smoothing != 0.f ? p.smoothing * (total / float(cols)) : 0.f) +
                        p.z_loss * lse * lse;
          break;
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(32 * kWarps) CrossEntropyBwdKernel(CrossEntropyBwdArgs p) {
  using V = Vec16<T>;
  const int lane = threadIdx.x & 31;
  const int64_t cols = p.shape.cols;
  const T* x = static_cast<const T*>(p.logits);
  T* dx = static_cast<T*>(p.dlogits);
  const float keep = 1.f - p.smoothing, spread = p.smoothing / float(cols);
  for (int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); row < p.shape.rows;
       row += int64_t(gridDim.x) * kWarps) {
    const int64_t off = row * cols;
    const int32_t y = p.labels[row];
    const LabelKind kind = KindOf(y, cols, p.has_ignore, p.ignore_index);
    const float g = p.g[row], lse = p.lse[row];
    const float pscale = g * (1.f + 2.f * p.z_loss * lse);
    for (int64_t j = lane; j < cols; j += 32) {
      float out;
      if (kind == LabelKind::kIgnored) {
        out = 0.f;
      } else if (kind == LabelKind::kInvalid) {
        out = NAN;
      } else {
        out = pscale * __expf(V::Load1(x + off + j) - lse) - g * (spread + (j == y ? keep : 0.f));
      }
      V::Store1(dx + off + j, out);
    }
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

cudaError_t CrossEntropyFwdCuda(const CrossEntropyFwdArgs& p, cudaStream_t stream) {
  if (p.shape.rows == 0 || p.shape.cols == 0) return cudaSuccess;
  if (CrossEntropyVecFits(p.shape.rows, p.shape.cols, ffi::ByteWidth(p.dtype), Aligned16(p.logits)))
    return CrossEntropyFwdVecCuda(p, stream);
  return LaunchByDtype(p.dtype, p.shape, [&](auto t, dim3 grid, dim3 block) {
    CrossEntropyFwdKernel<decltype(t)><<<grid, block, 0, stream>>>(p);
  });
}

cudaError_t CrossEntropyBwdCuda(const CrossEntropyBwdArgs& p, cudaStream_t stream) {
  if (p.shape.rows == 0 || p.shape.cols == 0) return cudaSuccess;
  if (CrossEntropyVecFits(p.shape.rows, p.shape.cols, ffi::ByteWidth(p.dtype),
                          Aligned16(p.logits) && Aligned16(p.dlogits)))
    return CrossEntropyBwdVecCuda(p, stream);
  return LaunchByDtype(p.dtype, p.shape, [&](auto t, dim3 grid, dim3 block) {
    CrossEntropyBwdKernel<decltype(t)><<<grid, block, 0, stream>>>(p);
  });
}

}  // namespace jaxdnn::softmax
