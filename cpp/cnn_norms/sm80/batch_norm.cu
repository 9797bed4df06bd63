// BatchNorm's steps on CUDA (formulas in cnn_norms/batch_norm.h), on the
// shared channels-last row walker (common/sm80/row_walk.cuh): each thread
// owns a 16-byte vector of channels (or one channel) and walks rows, so its
// channels' statistics and parameters stay in registers. The column sums
// write float32 partial rows per chunk of rows (workspace [chunks, 2, C]),
// added in chunk order by a second kernel: deterministic.
#include "cnn_norms/sm80/batch_norm_launch.h"
#include "common/sm80/row_walk.cuh"
#include "common/switches.h"

namespace jaxdnn::cnn_norms {
namespace {

// A thread's channels' statistics and parameters, worked out once for the
// block, a thread a channel, into shared memory (rather than N per thread,
// repeated over the block's rows of threads), and read from there in the
// row loop: held in registers, six per channel took the backward to 156
// registers and one block a multiprocessor. Every thread of the block
// constructs it.
template <int N>
struct Channels {
  enum { kMean, kRstd, kScale, kBias, kMdz, kMdzx, kGain, kCount };
  const float (*sm)[256];
  int at;
  __device__ Channels(const BatchNormArgs& p, float (*shared)[256], bool with_totals = false)
      : sm(shared), at(threadIdx.x * N) {
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int64_t c = int64_t(blockIdx.x) * blockDim.x * N + tid;
    if (tid < int(blockDim.x) * N && c < p.shape.channels) {
      const ChannelStats s = StatsOf(p, c);
      const bool totals = with_totals && p.attrs.training;
      shared[kMean][tid] = s.mean;
      shared[kRstd][tid] = s.rstd;
      shared[kScale][tid] = p.scale[c];
      shared[kBias][tid] = p.bias[c];
      shared[kMdz][tid] = totals ? p.total_dz[c] / p.count[c] : 0.f;
      shared[kMdzx][tid] = totals ? p.total_dzx[c] / p.count[c] : 0.f;
      shared[kGain][tid] = s.rstd * p.scale[c];
    }
    __syncthreads();
  }
  __device__ float get(int k, int e) const { return sm[k][at + e]; }
  __device__ float mean(int e) const { return get(kMean, e); }
  __device__ float rstd(int e) const { return get(kRstd, e); }
  __device__ float scale(int e) const { return get(kScale, e); }
  __device__ float bias(int e) const { return get(kBias, e); }
  __device__ float mdz(int e) const { return get(kMdz, e); }
  __device__ float mdzx(int e) const { return get(kMdzx, e); }
  __device__ float gain(int e) const { return get(kGain, e); }
};

// The shared memory a block's Channels fills.
using ChannelTable = float[Channels<1>::kCount][256];

// The rows a block walks: its chunk (column sums) or a grid stride.
struct RowRange {
  int64_t first, last, stride;
};
__device__ inline RowRange ChunkRows(int64_t rows, int64_t chunk_rows) {
  return {int64_t(blockIdx.y) * chunk_rows + threadIdx.y, min(rows, (int64_t(blockIdx.y) + 1) * chunk_rows),
          int64_t(blockDim.y)};
}
__device__ inline RowRange StridedRows(int64_t rows) {
  return {int64_t(blockIdx.y) * blockDim.y + threadIdx.y, rows, int64_t(gridDim.y) * blockDim.y};
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(256, 4) StatsKernel(BatchNormArgs p, int64_t chunk_rows) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  __shared__ float lanes[256 * N];
  const int64_t cols = p.shape.channels, col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  const bool live = col < cols;
  float k[N], acc[2][N] = {};
#pragma unroll
  for (int e = 0; e < N; ++e) k[e] = live ? p.shift[col + e] : 0.f;
  const T* x = static_cast<const T*>(p.x);
  const RowRange rr = ChunkRows(p.shape.rows, chunk_rows);
  if (live) {
    using Raw = typename P::Raw;
    WalkRows<Raw>(
        rr.first, rr.last, rr.stride, [&](int64_t r) { return P::Load(x + r * cols + col); },
        [&](int64_t, const Raw& raw) {
          float v[N];
          P::Unpack(raw, v);
#pragma unroll
          for (int e = 0; e < N; ++e) {
            const float d = v[e] - k[e];
            acc[0][e] += d;
            acc[1][e] = fmaf(d, d, acc[1][e]);
          }
        });
  }
  BlockColumnSums<2, N>(acc, lanes, live, p.partials + int64_t(blockIdx.y) * 2 * cols + col, cols);
}

template <typename T, Act A, bool kVec>
__global__ void __launch_bounds__(256) ApplyKernel(BatchNormArgs p) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  const int64_t cols = p.shape.channels, col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  __shared__ ChannelTable channels;
  const Channels<N> ch(p, channels);
  if (col >= cols) return;
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);
  T* y = static_cast<T*>(p.y);
  const RowRange rr = StridedRows(p.shape.rows);
  using Raw = Loads<typename P::Raw, 2>;
  WalkRows<Raw>(
      rr.first, rr.last, rr.stride,
      [&](int64_t r) {
        return Raw{{P::Load(x + r * cols + col), res ? P::Load(res + r * cols + col) : typename P::Raw{}}};
      },
      [&](int64_t r, const Raw& raw) {
        float v[N], rv[N];
        P::Unpack(raw.op[0], v);
        if (res) P::Unpack(raw.op[1], rv);
#pragma unroll
        for (int e = 0; e < N; ++e) {
          float z = (v[e] - ch.mean(e)) * ch.rstd(e) * ch.scale(e) + ch.bias(e);
          if (res) z += rv[e];
          v[e] = Apply<A>(z, p.attrs.param);
        }
        P::Store(y + r * cols + col, v);
      });
}

// dz and xhat of a row's channels.
template <typename P, Act A, int N>
__device__ inline void Dz(const BatchNormArgs& p, const Channels<N>& ch, const typename P::Raw (&raw)[3],
                          bool res, float (&dz)[N], float (&xhat)[N]) {
  float g[N], v[N], rv[N];
  P::Unpack(raw[0], g);
  P::Unpack(raw[1], v);
  if (res) P::Unpack(raw[2], rv);
#pragma unroll
  for (int e = 0; e < N; ++e) {
    xhat[e] = (v[e] - ch.mean(e)) * ch.rstd(e);
    float z = xhat[e] * ch.scale(e) + ch.bias(e);
    if (res) z += rv[e];
    dz[e] = Backprop<A>(z, g[e], p.attrs.param);
  }
}

template <typename T, Act A, bool kVec>
__global__ void __launch_bounds__(256, 2) BwdReduceKernel(BatchNormArgs p, int64_t chunk_rows) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  __shared__ float lanes[256 * N];
  const int64_t cols = p.shape.channels, col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  const bool live = col < cols;
  __shared__ ChannelTable channels;
  const Channels<N> ch(p, channels);
  const T* dy = static_cast<const T*>(p.dy);
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);
  float acc[2][N] = {};
  const RowRange rr = ChunkRows(p.shape.rows, chunk_rows);
  if (live) {
    using Raw = Loads<typename P::Raw, 3>;
    WalkRows<Raw>(
        rr.first, rr.last, rr.stride,
        [&](int64_t r) {
          const int64_t i = r * cols + col;
          return Raw{{P::Load(dy + i), P::Load(x + i), res ? P::Load(res + i) : typename P::Raw{}}};
        },
        [&](int64_t, const Raw& raw) {
          float dz[N], xhat[N];
          Dz<P, A, N>(p, ch, raw.op, res != nullptr, dz, xhat);
#pragma unroll
          for (int e = 0; e < N; ++e) {
            acc[0][e] += dz[e];
            acc[1][e] = fmaf(dz[e], xhat[e], acc[1][e]);
          }
        });
  }
  BlockColumnSums<2, N>(acc, lanes, live, p.partials + int64_t(blockIdx.y) * 2 * cols + col, cols);
}

template <typename T, Act A, bool kVec>
__global__ void __launch_bounds__(256, 2) BwdApplyKernel(BatchNormArgs p) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  const int64_t cols = p.shape.channels, col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  __shared__ ChannelTable channels;
  const Channels<N> ch(p, channels, true);
  if (col >= cols) return;
  const T* dy = static_cast<const T*>(p.dy);
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);
  T* dx = static_cast<T*>(p.y);
  T* dres = static_cast<T*>(p.dresidual);
  const RowRange rr = StridedRows(p.shape.rows);
  using Raw = Loads<typename P::Raw, 3>;
  WalkRows<Raw>(
      rr.first, rr.last, rr.stride,
      [&](int64_t r) {
        const int64_t i = r * cols + col;
        return Raw{{P::Load(dy + i), P::Load(x + i), res ? P::Load(res + i) : typename P::Raw{}}};
      },
      [&](int64_t r, const Raw& raw) {
        float dz[N], xhat[N], out[N];
        Dz<P, A, N>(p, ch, raw.op, res != nullptr, dz, xhat);
        if (dres) P::Store(dres + r * cols + col, dz);
#pragma unroll
        for (int e = 0; e < N; ++e) out[e] = ch.gain(e) * (dz[e] - ch.mdz(e) - xhat[e] * ch.mdzx(e));
        P::Store(dx + r * cols + col, out);
      });
}

// The running statistics after apply (Flax's update), one thread a channel.
__global__ void __launch_bounds__(256) RunningKernel(BatchNormArgs p) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= p.shape.channels) return;
  const ChannelStats s = StatsOf(p, c);
  const float m = p.attrs.momentum;
  p.out1[c] = p.attrs.training ? m * p.shift[c] + (1.f - m) * s.mean : p.shift[c];
  p.out2[c] = p.attrs.training ? m * p.running_var[c] + (1.f - m) * s.var : p.running_var[c];
}

template <typename Launch>
LaunchStatus ByDtypeVec(ffi::DataType dtype, int32_t act, bool vec, Launch launch) {
  return ByDtypeAct(dtype, act, [&](auto t, auto a) -> LaunchStatus {
    return vec ? launch(t, a, std::true_type{}) : launch(t, a, std::false_type{});
  });
}

// The apply kernels' grid: rows_plan.h's two waves of row-walking blocks,
// or with JAXDNN_BN_GRID=rows a block for every few rows (the grid that took
// the activations' elementwise kernels from 91-96% to 95-102% of copy).
GridPlan ElementwisePlan(int64_t rows, int64_t cols, int64_t item) {
  const GridPlan g = MakeGridPlan(rows, cols, cols, item);
  return SwitchText(Switch::kBnGrid) == "rows" ? OneRowGroupAThread(g, rows, kUnroll) : g;
}

}  // namespace

int64_t BatchNormPartials(int64_t rows, int64_t channels, int64_t itemsize) {
  return MakeColumnSumPlan(rows, channels, itemsize).row_blocks;
}

LaunchStatus BatchNormCuda(BatchNormStep step, const BatchNormArgs& p, cudaStream_t stream) {
  const int64_t rows = p.shape.rows, cols = p.shape.channels, item = ffi::ByteWidth(p.dtype);
  if (cols == 0) return cudaSuccess;
  const bool sums = step == BatchNormStep::kStats || step == BatchNormStep::kBwdReduce;
  if (rows == 0) {
    if (sums) {
      cudaError_t e = cudaMemsetAsync(p.out1, 0, sizeof(float) * cols, stream);
      return e != cudaSuccess ? e : cudaMemsetAsync(p.out2, 0, sizeof(float) * cols, stream);
    }
    if (step == BatchNormStep::kApply) RunningKernel<<<unsigned(CeilDiv(cols, 256)), 256, 0, stream>>>(p);
    return Checked();
  }
  const GridPlan g = sums ? MakeColumnSumPlan(rows, cols, item) : ElementwisePlan(rows, cols, item);
  if (sums && p.workspace_elems < g.row_blocks * 2 * cols) {
    return LaunchStatus::Refused("the workspace is smaller than the plan's column-sum partials");
  }
  const int64_t chunk_rows = CeilDiv(rows, g.row_blocks);
  LaunchStatus s = ByDtypeVec(p.dtype, step == BatchNormStep::kStats ? 0 : p.attrs.act, g.vec,
                              [&](auto t, auto a, auto v) -> LaunchStatus {
                                using T = decltype(t);
                                constexpr Act A = decltype(a)::value;
                                constexpr bool V = decltype(v)::value;
                                switch (step) {
                                  case BatchNormStep::kStats:
                                    StatsKernel<T, V><<<Grid(g), Block(g), 0, stream>>>(p, chunk_rows);
                                    break;
                                  case BatchNormStep::kApply:
                                    ApplyKernel<T, A, V><<<Grid(g), Block(g), 0, stream>>>(p);
                                    break;
                                  case BatchNormStep::kBwdReduce:
                                    BwdReduceKernel<T, A, V><<<Grid(g), Block(g), 0, stream>>>(p, chunk_rows);
                                    break;
                                  case BatchNormStep::kBwdApply:
                                    BwdApplyKernel<T, A, V><<<Grid(g), Block(g), 0, stream>>>(p);
                                    break;
                                }
                                return Checked();
                              });
  if (!s.ok()) return s;
  if (sums) {
    LaunchColumnPartials<2>(p.partials, p.out1, p.out2, g.row_blocks, cols, stream);
  } else if (step == BatchNormStep::kApply) {
    RunningKernel<<<unsigned(CeilDiv(cols, 256)), 256, 0, stream>>>(p);
  }
  return Checked();
}

}  // namespace jaxdnn::cnn_norms
