// Register-resident softmax and log-softmax forward: each thread loads its
// vectors of the row once, takes its own (max, sum of exp) pair from them,
// one merge over the row's threads, warps and cluster CTAs gives the row's,
// and each thread writes its outputs from its registers: one read and one
// write of the row, one exp per element (softmax keeps exp(v - own max) and
// rescales it by exp(own max - row max) / sum).
#include "softmax/sm90/cluster_rows.cuh"
#include "softmax/sm90/row_launch.h"
#include "softmax/sm90/softmax_vec.h"

namespace jaxdnn::softmax {
namespace {

template <typename T, bool kLog, bool kMasked, int kVpt>
__global__ void __launch_bounds__(kRowThreads) SoftmaxFwdVecKernel(SoftmaxFwdArgs p, int cluster) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  __shared__ MaxSum warp_slots[32];
  __shared__ MaxSum cta_slot;
  const int64_t cols = p.shape.cols, nvec = cols / N;
  const RowShare sh = ThisShare(p.shape.rows, nvec, cluster);
  const T* x = static_cast<const T*>(p.x) + sh.row * cols;

  uint4 raw[kVpt];
  RowKeep<kMasked, N, kVpt> kept;
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    const int64_t j = sh.first + threadIdx.x + int64_t(k) * blockDim.x;
    const bool in = sh.live && j < sh.end;
    raw[k] = in ? LoadStream(x + j * N) : make_uint4(0, 0, 0, 0);
    kept.Load(k, in, p.where + sh.row * cols + j * N);
  }
  // Dropped entries (and padding) count as -inf: no part of the max or sum.
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    float v[N];
    V::Unpack(raw[k], v);
    const bool in = InShare(sh, k);
#pragma unroll
    for (int e = 0; e < N; ++e) m = kept(k, e, in) ? fmaxf(m, v[e]) : m;
  }
  // exp(v - m) as 2^(v log2e - m log2e); a -inf entry adds 0 whatever m is
  // (m is -inf when the thread has nothing finite), a NaN adds NaN.
  const float ml = m * kLog2e;
  float s = 0.f;
  float ex[kLog ? 1 : kVpt * N];
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    float v[N];
    V::Unpack(raw[k], v);
    const bool in = InShare(sh, k);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const float t = (kept(k, e, in) && v[e] != -INFINITY) ? Exp2(fmaf(v[e], kLog2e, -ml)) : 0.f;
      if constexpr (!kLog) ex[k * N + e] = t;
      s += t;
    }
  }
  const MaxSum row = RowReduce(MaxSum{m, s}, warp_slots, &cta_slot, cluster);
  // jax.nn's NaN cases follow from the arithmetic: a +inf max gives
  // exp(inf - inf); a row whose kept entries are all -inf gives a -inf max
  // and a zero sum, exp(-inf - -inf) below (log: -inf - -inf).
  if (sh.live) {
    T* y = static_cast<T*>(p.y) + sh.row * cols;
    float scale = 0.f, shift = 0.f;
    if constexpr (kLog)
      shift = __logf(row.s);
    else
      scale = Exp2((m - row.m) * kLog2e) / row.s;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = sh.first + threadIdx.x + int64_t(k) * blockDim.x;
      if (j >= sh.end) continue;
      float v[N], out[N];
      V::Unpack(raw[k], v);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        if constexpr (kLog)
          out[e] = kept(k, e, true) ? (v[e] - row.m) - shift : -INFINITY;
        else
          out[e] = kept(k, e, true) ? ex[k * N + e] * scale : 0.f;
      }
      StoreStream(y + j * N, V::Pack(out));
    }
  }
  RowReduceDone(cluster);
}

template <typename T, bool kLog, bool kMasked>
cudaError_t LaunchFwd(const SoftmaxFwdArgs& p, const RowSplit& s, cudaStream_t stream) {
  switch (s.vpt) {
    case 1:
      return LaunchRows(SoftmaxFwdVecKernel<T, kLog, kMasked, 1>, s, p.shape.rows, stream, p, s.cluster);
    case 2:
      return LaunchRows(SoftmaxFwdVecKernel<T, kLog, kMasked, 2>, s, p.shape.rows, stream, p, s.cluster);
    case 4:
      return LaunchRows(SoftmaxFwdVecKernel<T, kLog, kMasked, 4>, s, p.shape.rows, stream, p, s.cluster);
    case 8:
      return LaunchRows(SoftmaxFwdVecKernel<T, kLog, kMasked, 8>, s, p.shape.rows, stream, p, s.cluster);
    default: return cudaErrorInvalidConfiguration;
  }
}

template <typename T>
cudaError_t LaunchFwdT(const SoftmaxFwdArgs& p, const RowSplit& s, cudaStream_t stream) {
  const bool masked = p.where != nullptr;
  if (p.log) return masked ? LaunchFwd<T, true, true>(p, s, stream) : LaunchFwd<T, true, false>(p, s, stream);
  return masked ? LaunchFwd<T, false, true>(p, s, stream) : LaunchFwd<T, false, false>(p, s, stream);
}

}  // namespace

cudaError_t SoftmaxFwdVecCuda(const SoftmaxFwdArgs& p, const RowSplit& s, cudaStream_t stream) {
  return ByDtype(p.dtype, [&](auto t) { return LaunchFwdT<decltype(t)>(p, s, stream); });
}

}  // namespace jaxdnn::softmax
