// The cross-entropy against probability targets on CUDA (formulas in
// softmax/problem.h), warp per row like sm80/cross_entropy_launch.cu: the
// forward reads logits and targets once (online max and sum of exp, and the
// sums of q, q x and x) and writes three floats per row; the backward is
// elementwise given the row's lse, a and b.
#include <cmath>

#include "common/cuda_vec.cuh"
#include "softmax/sm80/cross_entropy_launch.h"
#include "softmax/sm80/warp_rows.cuh"

namespace jaxdnn::softmax {
namespace {

template <typename T>
__global__ void __launch_bounds__(32 * kWarps) SoftFwdKernel(SoftCrossEntropyFwdArgs p) {
  using V = Vec16<T>;
  const int lane = threadIdx.x & 31;
  const int64_t cols = p.shape.cols;
  const T* x = static_cast<const T*>(p.logits);
  const T* q = static_cast<const T*>(p.targets);
  for (int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); row < p.shape.rows;
       row += int64_t(gridDim.x) * kWarps) {
    const int64_t off = row * cols;
    float m = -INFINITY, s = 0.f, total = 0.f, qsum = 0.f, qx = 0.f;
    for (int64_t j = lane; j < cols; j += 32) {
      const float v = V::Load1(x + off + j), t = V::Load1(q + off + j);
      total += v;
      qsum += t;
      qx += t * v;
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
      qsum += __shfl_xor_sync(0xffffffffu, qsum, o);
      qx += __shfl_xor_sync(0xffffffffu, qx, o);
    }
    if (m == INFINITY || m == -INFINITY) s = NAN;  // exp(inf - inf), or every logit -inf
    if (lane == 0) {
      const float lse = m + __logf(s), keep = 1.f - p.smoothing;
      const float sx = keep * qx + (p.smoothing != 0.f ? (p.smoothing / float(cols)) * total : 0.f);
      p.lse[row] = lse;
      p.target_sum[row] = qsum;
      p.loss[row] = lse * (keep * qsum + p.smoothing) - sx + p.z_loss * lse * lse;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(32 * kWarps) SoftBwdKernel(SoftCrossEntropyBwdArgs p) {
  using V = Vec16<T>;
  const int lane = threadIdx.x & 31;
  const int64_t cols = p.shape.cols;
  const T* x = static_cast<const T*>(p.logits);
  const T* q = static_cast<const T*>(p.targets);
  T* dx = static_cast<T*>(p.dlogits);
  const float keep = 1.f - p.smoothing, spread = p.smoothing / float(cols);
  for (int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); row < p.shape.rows;
       row += int64_t(gridDim.x) * kWarps) {
    const int64_t off = row * cols;
    const float a = p.a[row], b = p.b[row], lse = p.lse[row];
    for (int64_t j = lane; j < cols; j += 32) {
      const float prob = __expf(V::Load1(x + off + j) - lse);
      V::Store1(dx + off + j, a * prob - b * fmaf(keep, V::Load1(q + off + j), spread));
    }
  }
}

}  // namespace

cudaError_t SoftCrossEntropyFwdCuda(const SoftCrossEntropyFwdArgs& p, cudaStream_t stream) {
  return LaunchByDtype(p.dtype, p.shape, [&](auto t, dim3 grid, dim3 block) {
    SoftFwdKernel<decltype(t)><<<grid, block, 0, stream>>>(p);
  });
}

cudaError_t SoftCrossEntropyBwdCuda(const SoftCrossEntropyBwdArgs& p, cudaStream_t stream) {
  return LaunchByDtype(p.dtype, p.shape, [&](auto t, dim3 grid, dim3 block) {
    SoftBwdKernel<decltype(t)><<<grid, block, 0, stream>>>(p);
  });
}

}  // namespace jaxdnn::softmax
