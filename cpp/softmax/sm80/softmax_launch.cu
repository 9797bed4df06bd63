// The softmax family's two-pass CUDA kernels: one warp per row, rows
// grid-strided (no grid limit), float32 throughout. The forward reads its row
// twice (an online max and sum, then the write), the backward twice (the dot,
// then the write); every reduction runs in a fixed lane order, so results are
// deterministic. They serve the rows the register-resident kernels
// (softmax/sm90/) cannot hold: widths that are not whole 16-byte vectors,
// unaligned views and rows longer than a cluster's registers.
#include <cmath>

#include "common/cuda_vec.cuh"
#include "common/switches.h"
#include "softmax/sm80/warp_rows.cuh"
#include "softmax/sm80/softmax_launch.h"
#include "softmax/sm90/softmax_vec.h"

namespace jaxdnn::softmax {
namespace {

// Merges two (max, sum of exp(x - max)) pairs; an empty part (sum 0, max
// -inf) adds 0.
__device__ inline void Merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  const float a = s == 0.f ? 0.f : s * __expf(m - mm);
  const float b = s2 == 0.f ? 0.f : s2 * __expf(m2 - mm);
  m = mm;
  s = a + b;
}

template <typename T, bool kLog>
__global__ void __launch_bounds__(32 * kWarps) SoftmaxFwdKernel(SoftmaxFwdArgs p) {
  using V = Vec16<T>;
  const int lane = threadIdx.x & 31;
  const int64_t cols = p.shape.cols;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  for (int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); row < p.shape.rows;
       row += int64_t(gridDim.x) * kWarps) {
    const int64_t off = row * cols;
    float m = -INFINITY, s = 0.f;
    int kept = 0;  // whether this lane saw a kept entry
    for (int64_t j = lane; j < cols; j += 32) {
      if (p.where != nullptr && !p.where[off + j]) continue;
      const float v = V::Load1(x + off + j);
      kept = 1;
      if (v == -INFINITY) continue;  // exp(-inf - max) = 0, unless the row's max is -inf (below)
      if (v > m) {
        s = s * __expf(m - v) + 1.f;  // s is 0 while m is -inf
        m = v;
      } else {
        s += __expf(v - m);  // a NaN v makes the sum NaN, as in jax.nn
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
      Merge(m, s, m2, s2);
      kept |= __shfl_xor_sync(0xffffffffu, kept, o);
    }
    // jax.nn's sum holds exp(inf - inf) when the max is +inf, and
    // exp(-inf - -inf) when every kept entry is -inf: NaN both times.
    if (m == INFINITY || (m == -INFINITY && kept)) s = NAN;
    const float inv = 1.f / s, log_s = __logf(s);
    for (int64_t j = lane; j < cols; j += 32) {
      const bool kept = p.where == nullptr || p.where[off + j];
      const float d = V::Load1(x + off + j) - m;
      float out;
      if constexpr (kLog) {
        out = kept ? d - log_s : -INFINITY;
      } else {
        out = kept ? __expf(d) * inv : 0.f;
      }
      V::Store1(y + off + j, out);
    }
  }
}

template <typename T, bool kLog>
__global__ void __launch_bounds__(32 * kWarps) SoftmaxBwdKernel(SoftmaxBwdArgs p) {
  using V = Vec16<T>;
  const int lane = threadIdx.x & 31;
  const int64_t cols = p.shape.cols;
  const T* y = static_cast<const T*>(p.y);
  const T* dy = static_cast<const T*>(p.dy);
  T* dx = static_cast<T*>(p.dx);
  for (int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); row < p.shape.rows;
       row += int64_t(gridDim.x) * kWarps) {
    const int64_t off = row * cols;
    float dot = 0.f;  // softmax: sum(dy * y); log-softmax: sum(dy)
    for (int64_t j = lane; j < cols; j += 32) {
      if (p.where != nullptr && !p.where[off + j]) continue;
      const float g = V::Load1(dy + off + j);
      dot += kLog ? g : g * V::Load1(y + off + j);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    for (int64_t j = lane; j < cols; j += 32) {
      const bool kept = p.where == nullptr || p.where[off + j];
      const float g = V::Load1(dy + off + j), v = V::Load1(y + off + j);
      const float out = !kept ? 0.f : kLog ? g - __expf(v) * dot : v * (g - dot);
      V::Store1(dx + off + j, out);
    }
  }
}

}  // namespace

namespace {

bool Aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Whether every buffer of a row split into 16-byte vectors is aligned for
// them (XLA's buffers are; views need not be), `where` to a vector's bytes.
bool VectorsAligned(ffi::DataType dtype, const bool* where, std::initializer_list<const void*> buffers) {
  for (const void* b : buffers)
    if (!Aligned(b, 16)) return false;
  return where == nullptr || Aligned(where, 16 / ffi::ByteWidth(dtype));
}

// Whether a row split over a cluster takes the staged kernels: rows without
// `where` whose buffers fit, split over at most 4 CTAs (auto; the 8-CTA
// splits measured slower staged: docs/perf/softmax.md) or any number (1).
bool Staged(const RowSplit& s, const bool* where, bool fits) {
  if (s.vpt == 0 || s.cluster == 1 || where != nullptr || !fits) return false;
  const std::string& v = SwitchText(Switch::kSoftmaxStaged);
  return v == "auto" ? s.cluster <= 4 : v == "1";
}

}  // namespace

cudaError_t SoftmaxFwdCuda(const SoftmaxFwdArgs& p, cudaStream_t stream) {
  if (p.shape.rows == 0 || p.shape.cols == 0) return cudaSuccess;
  const RowSplit s = ChooseRowSplit(p.shape.rows, p.shape.cols, ffi::ByteWidth(p.dtype),
                                    VectorsAligned(p.dtype, p.where, {p.x, p.y}),
                                    SwitchInt(Switch::kSoftmaxShare, kShareVectors));
  if (Staged(s, p.where, StagedFits(s, p.shape.cols, ffi::ByteWidth(p.dtype), 2)))
    return SoftmaxFwdStagedCuda(p, s, SwitchText(Switch::kSoftmaxStagedFwd) == "recompute", stream);
  if (s.vpt > 0) return SoftmaxFwdVecCuda(p, s, stream);
  return LaunchByDtype(p.dtype, p.shape, [&](auto t, dim3 grid, dim3 block) {
    using T = decltype(t);
    p.log ? SoftmaxFwdKernel<T, true><<<grid, block, 0, stream>>>(p)
          : SoftmaxFwdKernel<T, false><<<grid, block, 0, stream>>>(p);
  });
}

cudaError_t SoftmaxBwdCuda(const SoftmaxBwdArgs& p, cudaStream_t stream) {
  if (p.shape.rows == 0 || p.shape.cols == 0) return cudaSuccess;
  const RowSplit s = ChooseRowSplit(p.shape.rows, p.shape.cols, ffi::ByteWidth(p.dtype),
                                    VectorsAligned(p.dtype, p.where, {p.y, p.dy, p.dx}),
                                    SwitchInt(Switch::kSoftmaxShare, kShareVectors));
  if (Staged(s, p.where, StagedFits(s, p.shape.cols, ffi::ByteWidth(p.dtype), 4)))
    return SoftmaxBwdStagedCuda(p, s, stream);
  if (s.vpt > 0) return SoftmaxBwdVecCuda(p, s, stream);
  return LaunchByDtype(p.dtype, p.shape, [&](auto t, dim3 grid, dim3 block) {
    using T = decltype(t);
    p.log ? SoftmaxBwdKernel<T, true><<<grid, block, 0, stream>>>(p)
          : SoftmaxBwdKernel<T, false><<<grid, block, 0, stream>>>(p);
  });
}

}  // namespace jaxdnn::softmax
