// Register-resident softmax and log-softmax backward: y and dy are read once
// into registers, one sum over the row (softmax: dy . y; log-softmax: the
// sum of dy) and dx is written from the registers.
#include "softmax/sm90/cluster_rows.cuh"
#include "softmax/sm90/row_launch.h"
#include "softmax/sm90/softmax_vec.h"

namespace jaxdnn::softmax {
namespace {

template <typename T, bool kLog, bool kMasked, int kVpt>
__global__ void __launch_bounds__(kRowThreads) SoftmaxBwdVecKernel(SoftmaxBwdArgs p, int cluster) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  __shared__ float warp_slots[32];
  __shared__ float cta_slot;
  const int64_t cols = p.shape.cols, nvec = cols / N;
  const RowShare sh = ThisShare(p.shape.rows, nvec, cluster);
  const int64_t base = sh.row * cols;

  uint4 ry[kVpt], rg[kVpt];
  RowKeep<kMasked, N, kVpt> kept;
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    const int64_t j = sh.first + threadIdx.x + int64_t(k) * blockDim.x;
    const bool in = sh.live && j < sh.end;
    ry[k] = in ? LoadStream(static_cast<const T*>(p.y) + base + j * N) : make_uint4(0, 0, 0, 0);
    rg[k] = in ? LoadStream(static_cast<const T*>(p.dy) + base + j * N) : make_uint4(0, 0, 0, 0);
    kept.Load(k, in, p.where + base + j * N);
  }
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    float y[N], g[N];
    V::Unpack(ry[k], y);
    V::Unpack(rg[k], g);
    const bool in = InShare(sh, k);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      if (kept(k, e, in)) dot += kLog ? g[e] : g[e] * y[e];
    }
  }
  dot = RowReduce(dot, warp_slots, &cta_slot, cluster);
  if (sh.live) {
    T* dx = static_cast<T*>(p.dx) + base;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = sh.first + threadIdx.x + int64_t(k) * blockDim.x;
      if (j >= sh.end) continue;
      float y[N], g[N], out[N];
      V::Unpack(ry[k], y);
      V::Unpack(rg[k], g);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float d = kLog ? g[e] - Exp2(y[e] * kLog2e) * dot : y[e] * (g[e] - dot);
        out[e] = kept(k, e, true) ? d : 0.f;
      }
      StoreStream(dx + j * N, V::Pack(out));
    }
  }
  RowReduceDone(cluster);
}

template <typename T, bool kLog, bool kMasked>
cudaError_t LaunchBwd(const SoftmaxBwdArgs& p, const RowSplit& s, cudaStream_t stream) {
  switch (s.vpt) {
    case 1:
      return LaunchRows(SoftmaxBwdVecKernel<T, kLog, kMasked, 1>, s, p.shape.rows, stream, p, s.cluster);
    case 2:
      return LaunchRows(SoftmaxBwdVecKernel<T, kLog, kMasked, 2>, s, p.shape.rows, stream, p, s.cluster);
    case 4:
      return LaunchRows(SoftmaxBwdVecKernel<T, kLog, kMasked, 4>, s, p.shape.rows, stream, p, s.cluster);
    case 8:
      return LaunchRows(SoftmaxBwdVecKernel<T, kLog, kMasked, 8>, s, p.shape.rows, stream, p, s.cluster);
    default: return cudaErrorInvalidConfiguration;
  }
}

template <typename T>
cudaError_t LaunchBwdT(const SoftmaxBwdArgs& p, const RowSplit& s, cudaStream_t stream) {
  const bool masked = p.where != nullptr;
  if (p.log) return masked ? LaunchBwd<T, true, true>(p, s, stream) : LaunchBwd<T, true, false>(p, s, stream);
  return masked ? LaunchBwd<T, false, true>(p, s, stream) : LaunchBwd<T, false, false>(p, s, stream);
}

}  // namespace

cudaError_t SoftmaxBwdVecCuda(const SoftmaxBwdArgs& p, const RowSplit& s, cudaStream_t stream) {
  return ByDtype(p.dtype, [&](auto t) { return LaunchBwdT<decltype(t)>(p, s, stream); });
}

}  // namespace jaxdnn::softmax
