// Softmax and log-softmax forward for rows split over a cluster, staged
// through shared memory: each CTA's share of a row arrives by one bulk copy
// (TMA, no registers held while it flies), two rows ahead of the one being
// computed, so the loads of the next rows overlap this row's reduction,
// cluster exchange and stores. Clusters stride over the rows (a grid of the
// clusters that fit at once). The arithmetic is the register kernel's
// (softmax_fwd.cu): own (max, sum) pair, one merge, one exp per element.
#include "common/cuda_device.h"
#include "common/sm90/ptx.cuh"
#include "softmax/sm90/cluster_rows.cuh"
#include "softmax/sm90/row_launch.h"
#include "softmax/sm90/softmax_vec.h"

namespace jaxdnn::softmax {
namespace {

// kRecompute: keep the row in shared memory until its outputs are written
// and take exp twice from it (few registers, more CTAs per SM) instead of
// holding the row and its exps in registers (one exp per element).
// One row's share from shared memory: the thread's max, its sum of exp, the
// merge, and the outputs, each pass reading the share again.
template <typename T, bool kLog>
__device__ inline void RecomputeRow(const SoftmaxFwdArgs& p, const uint4* sx, int64_t count, int64_t at,
                                    MaxSum* warp_slots, MaxSum* cta_slot, int cluster) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    float v[N];
    V::Unpack(sx[j], v);
#pragma unroll
    for (int e = 0; e < N; ++e) m = fmaxf(m, v[e]);
  }
  const float ml = m * kLog2e;
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    float v[N];
    V::Unpack(sx[j], v);
#pragma unroll
    for (int e = 0; e < N; ++e) s += v[e] != -INFINITY ? Exp2(fmaf(v[e], kLog2e, -ml)) : 0.f;
  }
  const MaxSum tot = RowReduceStep(MaxSum{m, s}, warp_slots, cta_slot, cluster);
  const float tl = tot.m * kLog2e, inv = 1.f / tot.s, shift = __logf(tot.s);
  T* y = static_cast<T*>(p.y) + at;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    float v[N], out[N];
    V::Unpack(sx[j], v);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      // exp(v - row max) / sum: with a -inf or +inf row max this is NaN,
      // as the register kernel's exp(own max - row max) makes it.
      if constexpr (kLog)
        out[e] = (v[e] - tot.m) - shift;
      else
        out[e] = Exp2(fmaf(v[e], kLog2e, -tl)) * inv;
    }
    StoreStream(y + j * N, V::Pack(out));
  }
}

template <typename T, bool kLog, int kVpt, bool kRecompute>
__global__ void __launch_bounds__(kRowThreads) SoftmaxFwdStagedKernel(SoftmaxFwdArgs p, int cluster) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  extern __shared__ __align__(128) uint4 stage[];  // [2][share]
  __shared__ __align__(8) uint64_t full[2];
  __shared__ MaxSum warp_slots[2][32];
  __shared__ MaxSum cta_slot[2];
  const int64_t rows = p.shape.rows, cols = p.shape.cols, nvec = cols / N;
  const int64_t share = (nvec + cluster - 1) / cluster;
  const int64_t rank = blockIdx.x % cluster, first = rank * share;
  const int64_t count = first >= nvec ? 0 : (nvec - first < share ? nvec - first : share);
  const uint32_t bytes = uint32_t(count * 16);
  const int64_t row0 = blockIdx.x / cluster, stride = gridDim.x / cluster;
  const T* x = static_cast<const T*>(p.x);

  auto issue = [&](int64_t row, int b) {
    if (row >= rows) return;
    sm90::MbarArriveExpectTx(&full[b], bytes);
    if (bytes > 0) sm90::BulkLoadG2S(stage + b * share, x + row * cols + first * N, bytes, &full[b]);
  };
  if (threadIdx.x == 0) {
    sm90::MbarInit(&full[0], 1);
    sm90::MbarInit(&full[1], 1);
    sm90::FenceMbarInit();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    issue(row0, 0);
    issue(row0 + stride, 1);
  }
  RowShare sh;
  sh.first = 0;
  sh.end = count;
  sh.live = true;
  int i = 0;
  for (int64_t row = row0; row < rows; row += stride, ++i) {
    const int b = i & 1;
    sm90::MbarWait(&full[b], (i >> 1) & 1);
    if constexpr (kRecompute) {
      RecomputeRow<T, kLog>(p, stage + b * share, count, row * cols + first * N, warp_slots[b], &cta_slot[b],
                            cluster);
      __syncthreads();  // every thread is done with buffer b: it takes the row after next
      if (threadIdx.x == 0) issue(row + 2 * stride, b);
      continue;
    }
    uint4 raw[kVpt];
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      raw[k] = j < count ? stage[b * share + j] : make_uint4(0, 0, 0, 0);
    }
    __syncthreads();  // every thread has read buffer b: it takes the row after next
    if (threadIdx.x == 0) issue(row + 2 * stride, b);

    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      float v[N];
      V::Unpack(raw[k], v);
      const bool in = InShare(sh, k);
#pragma unroll
      for (int e = 0; e < N; ++e) m = in ? fmaxf(m, v[e]) : m;
    }
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
        const float t = (in && v[e] != -INFINITY) ? Exp2(fmaf(v[e], kLog2e, -ml)) : 0.f;
        if constexpr (!kLog) ex[k * N + e] = t;
        s += t;
      }
    }
    const MaxSum tot = RowReduceStep(MaxSum{m, s}, warp_slots[b], &cta_slot[b], cluster);
    T* y = static_cast<T*>(p.y) + row * cols + first * N;
    float scale = 0.f, shift = 0.f;
    if constexpr (kLog)
      shift = __logf(tot.s);
    else
      scale = Exp2((m - tot.m) * kLog2e) / tot.s;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      if (j >= count) continue;
      float v[N], out[N];
      V::Unpack(raw[k], v);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        if constexpr (kLog)
          out[e] = (v[e] - tot.m) - shift;
        else
          out[e] = ex[k * N + e] * scale;
      }
      StoreStream(y + j * N, V::Pack(out));
    }
  }
  // No CTA leaves while another may still read its slots.
  if (cluster > 1) cooperative_groups::this_cluster().sync();
}

template <typename T, bool kLog, int kVpt, bool kRecompute>
cudaError_t LaunchStaged(const SoftmaxFwdArgs& p, const RowSplit& s, cudaStream_t stream) {
  auto kernel = SoftmaxFwdStagedKernel<T, kLog, kVpt, kRecompute>;
  const int64_t nvec = p.shape.cols / Vec16<T>::kElems;
  const int smem = int(2 * CeilDiv(nvec, s.cluster) * 16);
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  int device = 0, sms = 0, per_sm = 0;
  if (err == cudaSuccess) err = StreamDevice(stream, &device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  per_sm = ResidentCtasOrOne(reinterpret_cast<const void*>(kernel), s.tpr, size_t(smem));
  // The clusters that fit at once (at least one); they stride over the rows.
  int64_t clusters = int64_t(sms) * per_sm / s.cluster;
  if (clusters < 1) clusters = 1;
  if (clusters > p.shape.rows) clusters = p.shape.rows;
  return LaunchClusters(kernel, s, clusters, smem, stream, p, s.cluster);
}

template <typename T, bool kLog>
cudaError_t LaunchStagedVpt(const SoftmaxFwdArgs& p, const RowSplit& s, bool recompute, cudaStream_t stream) {
  if (recompute) return LaunchStaged<T, kLog, 1, true>(p, s, stream);
  switch (s.vpt) {
    case 1: return LaunchStaged<T, kLog, 1, false>(p, s, stream);
    case 2: return LaunchStaged<T, kLog, 2, false>(p, s, stream);
    case 4: return LaunchStaged<T, kLog, 4, false>(p, s, stream);
    case 8: return LaunchStaged<T, kLog, 8, false>(p, s, stream);
    default: return cudaErrorInvalidConfiguration;
  }
}

}  // namespace

cudaError_t SoftmaxFwdStagedCuda(const SoftmaxFwdArgs& p, const RowSplit& s, bool recompute,
                                 cudaStream_t stream) {
  return ByDtype(p.dtype, [&](auto t) {
    using T = decltype(t);
    return p.log ? LaunchStagedVpt<T, true>(p, s, recompute, stream)
                 : LaunchStagedVpt<T, false>(p, s, recompute, stream);
  });
}

}  // namespace jaxdnn::softmax
