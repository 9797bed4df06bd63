// BatchNorm's steps on CUDA (formulas in cnn_norms/batch_norm.h), on the
// shared channels-last row walker (common/sm80/row_walk.cuh): each thread
// owns a 16-byte vector of channels (or one channel) and walks rows, so its
// channels' statistics and parameters stay in registers. The column sums
// write float32 partial rows per chunk of rows (workspace [chunks, 2, C]),
// added in chunk order by a second kernel: deterministic.
#include <type_traits>

#include "cnn_norms/sm80/batch_norm_launch.h"
#include "common/sm80/row_walk.cuh"
#include "common/switches.h"

namespace jaxdnn::cnn_norms {
namespace {

// A block's channels' coefficients, worked out once a channel (a thread
// each) into shared memory, then copied into each thread's registers for its
// own N channels: the row loop then reads no memory but the rows. With d =
// x - mean (kept as a difference, so large offsets cancel exactly first):
//   xhat = d rstd,  z = d gain + bias (+ residual),  gain = rstd scale,
//   dx = gain dz + d a + b,  a = -gain rstd t_dzx / n,  b = -gain t_dz / n
// (a = b = 0 in inference). Every thread of the block constructs it.
enum Coef { kMean, kRstd, kGain, kBias, kA, kB, kCoefs };
using ChannelTable = float[kCoefs][256];

template <int N>
struct Channels {
  const float (*sm)[256];
  int at;
  __device__ Channels(const BatchNormArgs& p, float (*shared)[256], bool with_totals = false)
      : sm(shared), at(threadIdx.x * N) {
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int64_t c = int64_t(blockIdx.x) * blockDim.x * N + tid;
    if (tid < int(blockDim.x) * N && c < p.shape.channels) {
      const ChannelStats s = StatsOf(p, c);
      const bool totals = with_totals && p.attrs.training;
      const float gain = s.rstd * p.scale[c];
      shared[kMean][tid] = s.mean;
      shared[kRstd][tid] = s.rstd;
      shared[kGain][tid] = gain;
      shared[kBias][tid] = p.bias[c];
      shared[kA][tid] = totals ? -gain * s.rstd * (p.total_dzx[c] / p.count[c]) : 0.f;
      shared[kB][tid] = totals ? -gain * (p.total_dz[c] / p.count[c]) : 0.f;
    }
    __syncthreads();
  }
  // The thread's N values of coefficient k, into registers.
  __device__ void Get(Coef k, float (&out)[N]) const {
#pragma unroll
    for (int e = 0; e < N; ++e) out[e] = sm[k][at + e];
  }
};

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

// A thread's N sign bits (bit e: column col + e) into the byte of its 8
// columns: 16-bit types own a byte; float32's thread pairs (adjacent lanes,
// one row, both live: channels are a multiple of 8) join their halves.
template <int N>
__device__ inline void StoreSignBits(uint8_t* byte, unsigned bits) {
  if constexpr (N == 8) {
    *byte = uint8_t(bits);
  } else if constexpr (N == 4) {
    const unsigned lane = (threadIdx.y * blockDim.x + threadIdx.x) & 31;
    const unsigned high = __shfl_xor_sync(3u << (lane & 30), bits, 1);
    if ((lane & 1) == 0) *byte = uint8_t(bits | (high << 4));
  }
}

// The N sign bits of column col's thread in the mask byte `byte`.
template <int N>
__device__ inline unsigned SignBits(uint8_t byte, int64_t col) {
  return N == 8 ? byte : (unsigned(byte) >> (col & 4)) & 0xF;
}

// The per-channel coefficients of z = d gain + bias in registers (see
// Channels), for the forward and both backward steps.
template <int N>
struct RowCoefs {
  float mean[N], gain[N], bias[N];
  __device__ explicit RowCoefs(const Channels<N>& ch) {
    ch.Get(kMean, mean);
    ch.Get(kGain, gain);
    ch.Get(kBias, bias);
  }
};

template <typename T, Act A, bool kVec>
__global__ void __launch_bounds__(256) ApplyKernel(BatchNormArgs p) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  const int64_t cols = p.shape.channels, col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  __shared__ ChannelTable channels;
  const Channels<N> ch(p, channels);
  if (col >= cols) return;
  const RowCoefs<N> k(ch);
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);
  T* y = static_cast<T*>(p.y);
  const int64_t mask_cols = cols / 8;
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
        unsigned bits = 0;
#pragma unroll
        for (int e = 0; e < N; ++e) {
          float z = fmaf(v[e] - k.mean[e], k.gain[e], k.bias[e]);
          if (res) z += rv[e];
          if (A == Act::kRelu) bits |= unsigned(z > 0.f) << e;
          v[e] = Apply<A>(z, p.attrs.param);
        }
        P::Store(y + r * cols + col, v);
        if (A == Act::kRelu && p.mask_out) StoreSignBits<N>(p.mask_out + r * mask_cols + col / 8, bits);
      });
}

// A backward row's raw loads: dy, x, the residual, and the sign bits.
template <typename Raw>
struct BwdRow {
  Raw op[3];
  uint8_t bits;
};

// The row loads of column col: x only where `need_x`; kMask (ReLU with the
// forward's sign bits, an instantiation of its own) the bits, else the
// residual where given.
template <typename P, typename T, bool kMask>
__device__ inline BwdRow<typename P::Raw> LoadBwdRow(const BatchNormArgs& p, int64_t r, int64_t col,
                                                     bool need_x) {
  const int64_t i = r * p.shape.channels + col;
  BwdRow<typename P::Raw> row{};
  row.op[0] = P::Load(static_cast<const T*>(p.dy) + i);
  if (need_x) row.op[1] = P::Load(static_cast<const T*>(p.x) + i);
  if (!kMask && p.residual) row.op[2] = P::Load(static_cast<const T*>(p.residual) + i);
  if (kMask) row.bits = p.mask[r * (p.shape.channels / 8) + col / 8];
  return row;
}

// dz and d = x - mean of a row's channels: dz through z recomputed, or from
// the forward's sign bits.
template <typename P, Act A, bool kMask, int N>
__device__ inline void Dz(const BatchNormArgs& p, const RowCoefs<N>& k, const BwdRow<typename P::Raw>& raw,
                          int64_t col, float (&dz)[N], float (&d)[N]) {
  float g[N], rv[N];
  P::Unpack(raw.op[0], g);
  P::Unpack(raw.op[1], d);
  if (!kMask && p.residual) P::Unpack(raw.op[2], rv);
  const unsigned bits = SignBits<N>(raw.bits, col);
#pragma unroll
  for (int e = 0; e < N; ++e) {
    d[e] -= k.mean[e];
    if constexpr (kMask) {
      dz[e] = (bits >> e) & 1 ? g[e] : 0.f;
    } else {
      float z = fmaf(d[e], k.gain[e], k.bias[e]);
      if (p.residual) z += rv[e];
      dz[e] = Backprop<A>(z, g[e], p.attrs.param);
    }
  }
}

template <typename T, Act A, bool kVec, bool kMask>
__global__ void __launch_bounds__(256, 2) BwdReduceKernel(BatchNormArgs p, int64_t chunk_rows) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  __shared__ float lanes[256 * N];
  const int64_t cols = p.shape.channels, col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  const bool live = col < cols;
  __shared__ ChannelTable channels;
  const Channels<N> ch(p, channels);
  const RowCoefs<N> k(ch);
  float acc[2][N] = {};
  const RowRange rr = ChunkRows(p.shape.rows, chunk_rows);
  if (live) {
    using Raw = BwdRow<typename P::Raw>;
    WalkRows<Raw>(
        rr.first, rr.last, rr.stride, [&](int64_t r) { return LoadBwdRow<P, T, kMask>(p, r, col, true); },
        [&](int64_t, const Raw& raw) {
          float dz[N], d[N];
          Dz<P, A, kMask, N>(p, k, raw, col, dz, d);
#pragma unroll
          for (int e = 0; e < N; ++e) {
            acc[0][e] += dz[e];
            acc[1][e] = fmaf(dz[e], d[e], acc[1][e]);
          }
        });
  }
  // sum dz xhat = rstd sum dz d: rstd applied once, after the rows.
  float rstd[N];
  ch.Get(kRstd, rstd);
#pragma unroll
  for (int e = 0; e < N; ++e) acc[1][e] *= rstd[e];
  BlockColumnSums<2, N>(acc, lanes, live, p.partials + int64_t(blockIdx.y) * 2 * cols + col, cols);
}

template <typename T, Act A, bool kVec, bool kMask>
__global__ void __launch_bounds__(256, 2) BwdApplyKernel(BatchNormArgs p) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  const int64_t cols = p.shape.channels, col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  __shared__ ChannelTable channels;
  const Channels<N> ch(p, channels, true);
  if (col >= cols) return;
  // a and b read from shared memory in the loop: in registers too, the
  // 16-bit kernels spill.
  const RowCoefs<N> k(ch);
  T* dx = static_cast<T*>(p.y);
  T* dres = static_cast<T*>(p.dresidual);
  // Inference with the sign bits: dx = gain dz needs no x.
  const bool need_x = p.attrs.training || !kMask;
  const RowRange rr = StridedRows(p.shape.rows);
  using Raw = BwdRow<typename P::Raw>;
  // Training and inference are separate loops: a select per element in one
  // loop cost the training backward 12-23% at C >= 256.
  auto walk = [&](auto training) {
    WalkRows<Raw>(
        rr.first, rr.last, rr.stride, [&](int64_t r) { return LoadBwdRow<P, T, kMask>(p, r, col, need_x); },
        [&](int64_t r, const Raw& raw) {
          float dz[N], d[N], out[N];
          Dz<P, A, kMask, N>(p, k, raw, col, dz, d);
          if (dres) P::Store(dres + r * cols + col, dz);
#pragma unroll
          for (int e = 0; e < N; ++e) {
            // Inference: gain dz alone (a NaN x must not reach dx through d * 0).
            out[e] = decltype(training)::value
                         ? fmaf(k.gain[e], dz[e], fmaf(d[e], ch.sm[kA][ch.at + e], ch.sm[kB][ch.at + e]))
                         : k.gain[e] * dz[e];
          }
          P::Store(dx + r * cols + col, out);
        });
  };
  if (p.attrs.training) {
    walk(std::true_type{});
  } else {
    walk(std::false_type{});
  }
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
  if (p.attrs.mask && !g.vec) return LaunchStatus::Refused("the sign mask needs 16-byte rows of channels");
  if (sums && p.workspace_elems < g.row_blocks * 2 * cols) {
    return LaunchStatus::Refused("the workspace is smaller than the plan's column-sum partials");
  }
  const int64_t chunk_rows = CeilDiv(rows, g.row_blocks);
  LaunchStatus s =
      ByDtypeVec(p.dtype, step == BatchNormStep::kStats ? 0 : p.attrs.act, g.vec,
                 [&](auto t, auto a, auto v) -> LaunchStatus {
                   using T = decltype(t);
                   constexpr Act A = decltype(a)::value;
                   constexpr bool V = decltype(v)::value;
                   // ReLU's backward on the sign bits is an instantiation of its own;
                   // the other activations have none (the call frame admits no mask).
                   constexpr bool kCanMask = A == Act::kRelu;
                   const bool masked = kCanMask && p.mask != nullptr;
                   switch (step) {
                     case BatchNormStep::kStats:
                       StatsKernel<T, V><<<Grid(g), Block(g), 0, stream>>>(p, chunk_rows);
                       break;
                     case BatchNormStep::kApply:
                       ApplyKernel<T, A, V><<<Grid(g), Block(g), 0, stream>>>(p);
                       break;
                     case BatchNormStep::kBwdReduce:
                       if (masked) {
                         BwdReduceKernel<T, A, V, kCanMask><<<Grid(g), Block(g), 0, stream>>>(p, chunk_rows);
                       } else {
                         BwdReduceKernel<T, A, V, false><<<Grid(g), Block(g), 0, stream>>>(p, chunk_rows);
                       }
                       break;
                     case BatchNormStep::kBwdApply:
                       if (masked) {
                         BwdApplyKernel<T, A, V, kCanMask><<<Grid(g), Block(g), 0, stream>>>(p);
                       } else {
                         BwdApplyKernel<T, A, V, false><<<Grid(g), Block(g), 0, stream>>>(p);
                       }
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
