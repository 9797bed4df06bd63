// Softmax and log-softmax backward for rows split over a cluster, staged
// through shared memory like the forward (softmax_fwd_staged.cu): each CTA's
// shares of y and dy arrive by bulk copies two rows ahead; the dot and the
// output read them from shared memory (two cheap passes, few registers), and
// the buffers are handed to the row after next once dx is written.
#include "common/cuda_device.h"
#include "common/sm90/ptx.cuh"
#include "softmax/sm90/cluster_rows.cuh"
#include "softmax/sm90/row_launch.h"
#include "softmax/sm90/softmax_vec.h"

namespace jaxdnn::softmax {
namespace {

template <typename T, bool kLog>
__global__ void __launch_bounds__(kRowThreads) SoftmaxBwdStagedKernel(SoftmaxBwdArgs p, int cluster) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  extern __shared__ __align__(128) uint4 stage[];  // [2 buffers][y, dy][share]
  __shared__ __align__(8) uint64_t full[2];
  __shared__ float warp_slots[2][32];
  __shared__ float cta_slot[2];
  const int64_t rows = p.shape.rows, cols = p.shape.cols, nvec = cols / N;
  const int64_t share = (nvec + cluster - 1) / cluster;
  const int64_t rank = blockIdx.x % cluster, first = rank * share;
  const int64_t count = first >= nvec ? 0 : (nvec - first < share ? nvec - first : share);
  const uint32_t bytes = uint32_t(count * 16);
  const int64_t row0 = blockIdx.x / cluster, stride = gridDim.x / cluster;
  const T* y = static_cast<const T*>(p.y);
  const T* dy = static_cast<const T*>(p.dy);

  auto issue = [&](int64_t row, int b) {
    if (row >= rows) return;
    sm90::MbarArriveExpectTx(&full[b], 2 * bytes);
    if (bytes > 0) {
      const int64_t at = row * cols + first * N;
      sm90::BulkLoadG2S(stage + (2 * b) * share, y + at, bytes, &full[b]);
      sm90::BulkLoadG2S(stage + (2 * b + 1) * share, dy + at, bytes, &full[b]);
    }
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
  int i = 0;
  for (int64_t row = row0; row < rows; row += stride, ++i) {
    const int b = i & 1;
    const uint4* sy = stage + (2 * b) * share;
    const uint4* sg = stage + (2 * b + 1) * share;
    sm90::MbarWait(&full[b], (i >> 1) & 1);
    float dot = 0.f;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      float v[N], g[N];
      V::Unpack(sg[j], g);
      if constexpr (!kLog) V::Unpack(sy[j], v);
#pragma unroll
      for (int e = 0; e < N; ++e) dot += kLog ? g[e] : g[e] * v[e];
    }
    dot = RowReduceStep(dot, warp_slots[b], &cta_slot[b], cluster);
    T* dx = static_cast<T*>(p.dx) + row * cols + first * N;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      float v[N], g[N], out[N];
      V::Unpack(sy[j], v);
      V::Unpack(sg[j], g);
#pragma unroll
      for (int e = 0; e < N; ++e) out[e] = kLog ? g[e] - Exp2(v[e] * kLog2e) * dot : v[e] * (g[e] - dot);
      StoreStream(dx + j * N, V::Pack(out));
    }
    __syncthreads();  // every thread is done with buffer b: it takes the row after next
    if (threadIdx.x == 0) issue(row + 2 * stride, b);
  }
  if (cluster > 1) cooperative_groups::this_cluster().sync();
}

template <typename T, bool kLog>
cudaError_t LaunchStaged(const SoftmaxBwdArgs& p, const RowSplit& s, cudaStream_t stream) {
  auto kernel = SoftmaxBwdStagedKernel<T, kLog>;
  const int64_t nvec = p.shape.cols / Vec16<T>::kElems;
  const int smem = int(4 * CeilDiv(nvec, s.cluster) * 16);
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  int device = 0, sms = 0, per_sm = 0;
  if (err == cudaSuccess) err = StreamDevice(stream, &device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  per_sm = ResidentCtasOrOne(reinterpret_cast<const void*>(kernel), s.tpr, size_t(smem));
  int64_t clusters = int64_t(sms) * per_sm / s.cluster;
  if (clusters < 1) clusters = 1;
  if (clusters > p.shape.rows) clusters = p.shape.rows;
  return LaunchClusters(kernel, s, clusters, smem, stream, p, s.cluster);
}

}  // namespace

cudaError_t SoftmaxBwdStagedCuda(const SoftmaxBwdArgs& p, const RowSplit& s, cudaStream_t stream) {
  return ByDtype(p.dtype, [&](auto t) {
    using T = decltype(t);
    return p.log ? LaunchStaged<T, true>(p, s, stream) : LaunchStaged<T, false>(p, s, stream);
  });
}

}  // namespace jaxdnn::softmax
