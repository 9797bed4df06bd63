// Kernels for the rows the register kernels cannot hold: odd widths and
// unaligned views (element accesses), and rows too wide for a thread's
// registers (16-byte vectors). Each row is swept twice. The first sweep takes
// the statistics (forward) or the row sums and the parameter-gradient partials
// (backward); the second reads the row again, mostly from L2 (a block holds
// one row per slot at a time, so the rows in flight fit there), and writes
// the output. The row's values never need to fit in registers; only the
// backward's per-column partials, in shared memory, must fit
// (ChooseBwdStream in norms/sm80/norm_config.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cooperative_groups.h>

#include "common/cuda_vec.cuh"
#include "norms/problem.h"
#include "norms/sm80/norm_backward.cuh"
#include "norms/sm80/norm_params.cuh"

namespace jaxdnn::norms {

// Row slots of a stream-kernel block at most (short rows share blocks).
constexpr int kStreamMaxSlots = 8;

// One access of a streamed row: a 16-byte vector (kVec) or one element.
// Load: the first sweep's read of an input (kept in cache for the second);
// LoadLast / Store: the second sweep's, evict-first when `stream` (the
// launch's RowCachePolicy; an evict-first load is also coherent with this
// thread's own writes, which the forward's residual sum z needs); Keep: a
// store read back later.
template <typename T, bool kVec>
struct Chunk {
  static constexpr int kElems = Vec16<T>::kElems;
  using Raw = uint4;
  __device__ static Raw Load(const T* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
  __device__ static Raw LoadLast(const T* p, bool stream) { return LoadRow(p, stream); }
  __device__ static void Store(T* p, const Raw& r, bool stream) { StoreRow(p, r, stream); }
  __device__ static void Keep(T* p, const Raw& r) { *reinterpret_cast<uint4*>(p) = r; }
  __device__ static void Unpack(const Raw& r, float* f) { Vec16<T>::Unpack(r, f); }
  __device__ static Raw Pack(const float* f) { return Vec16<T>::Pack(f); }
  // The kElems parameters from column c (norms/sm80/norm_params.cuh).
  template <typename P>
  __device__ static void Params(const void* params, int64_t c, P params16, float* f) {
#pragma unroll
    for (int q = 0; q < kElems / 4; ++q) {
      const float4 v = LoadParam4<T>(params, c + 4 * q, params16);
      f[4 * q] = v.x;
      f[4 * q + 1] = v.y;
      f[4 * q + 2] = v.z;
      f[4 * q + 3] = v.w;
    }
  }
};

template <typename T>
struct Chunk<T, false> {
  static constexpr int kElems = 1;
  using Raw = T;
  __device__ static Raw Load(const T* p) { return __ldg(p); }
  __device__ static Raw LoadLast(const T* p, bool stream) { return stream ? __ldcs(p) : __ldg(p); }
  __device__ static void Store(T* p, const Raw& r, bool stream) {
    if (stream) {
      __stcs(p, r);
    } else {
      *p = r;
    }
  }
  __device__ static void Keep(T* p, const Raw& r) { *p = r; }
  __device__ static void Unpack(const Raw& r, float* f) { f[0] = ToF32(r); }
  __device__ static Raw Pack(const float* f) { return FromF32<T>(f[0]); }
  template <typename P>
  __device__ static void Params(const void* params, int64_t c, P params16, float* f) {
    f[0] = LoadParam1<T>(params, c, params16);
  }
};

// Chan et al.'s merge of two (count, mean, M2) summaries, written so that
// merge(a, b) and merge(b, a) agree bit for bit (the mean as a weighted sum,
// the squared difference symmetric): a butterfly then leaves every lane of a
// warp the same value.
__device__ inline float3 MergeMeanM2(float3 a, float3 b) {
  const float n = a.x + b.x;
  if (n == 0.0f) return a;
  const float d = b.y - a.y;
  return make_float3(n, (a.x * a.y + b.x * b.y) / n, a.z + b.z + d * d * (a.x * b.x / n));
}

__device__ inline float3 WarpMergeMeanM2(float3 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    v = MergeMeanM2(v, make_float3(__shfl_xor_sync(0xffffffffu, v.x, o), __shfl_xor_sync(0xffffffffu, v.y, o),
                                   __shfl_xor_sync(0xffffffffu, v.z, o)));
  }
  return v;
}

// (count, mean, M2) over the blockDim.x threads of this row slot: a
// butterfly within each warp, then one over the warps' summaries (lane i
// holding warp i's), so every thread gets the same bits, run after run. One
// barrier; `scratch` holds blockDim.y * 96 floats and must not be written
// again by the kernel.
__device__ inline float3 RowMergeMeanM2(float3 v, float* scratch) {
  v = WarpMergeMeanM2(v);
  const int warps = blockDim.x >> 5;
  if (warps == 1) return v;
  float* s = scratch + threadIdx.y * 96;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    s[warp] = v.x;
    s[32 + warp] = v.y;
    s[64 + warp] = v.z;
  }
  __syncthreads();
  return WarpMergeMeanM2(lane < warps ? make_float3(s[lane], s[32 + lane], s[64 + lane])
                                      : make_float3(0.0f, 0.0f, 0.0f));
}

// Forward. LayerNorm takes its statistics about a shift, the row's first
// value (one broadcast read), as the register kernels do: each thread keeps
// the count, sum and sum of squares of v - shift, and the threads' (count,
// mean, M2) are merged exactly; the output is (v - shift) - shifted mean.
template <typename T, bool kLayer, bool kResidual, bool kVec>
__global__ void __launch_bounds__(1024) NormFwdStreamKernel(NormFwdArgs p) {
  using C = Chunk<T, kVec>;
  using Raw = typename C::Raw;
  constexpr int N = C::kElems;
  // Chunks a thread has in flight per sweep step: an element row's sixteen
  // at once (one round trip a sweep; four at a time left 4097-wide rows
  // latency-bound; eight with a residual, within 64 registers), a vector
  // row's four.
  constexpr int kBatch = kVec ? 4 : kResidual ? 8 : 16;
  __shared__ float scratch[32 * 96];
  const int64_t dim = p.shape.dim, n = dim / N;
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < p.shape.rows;
  const int64_t base = live ? row * dim : 0;
  const T* x = static_cast<const T*>(p.x) + base;
  const T* res = kResidual ? static_cast<const T*>(p.residual) + base : nullptr;
  T* z = kResidual ? static_cast<T*>(p.z) + base : nullptr;
  const int step = blockDim.x;

  float shift = 0.0f;
  if (kLayer && live) {
    shift = ToF32(__ldg(x));
    if constexpr (kResidual) shift += ToF32(__ldg(res));
  }
  float cnt = 0.0f, sum = 0.0f, sq = 0.0f;
  for (int64_t j0 = threadIdx.x; live && j0 < n; j0 += int64_t(kBatch) * step) {
    Raw r[kBatch], w[kResidual ? kBatch : 1];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t j = j0 + int64_t(b) * step;
      if (j < n) {
        r[b] = C::Load(x + j * N);
        if constexpr (kResidual) w[b] = C::Load(res + j * N);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t j = j0 + int64_t(b) * step;
      if (j >= n) continue;
      float v[N];
      C::Unpack(r[b], v);
      if constexpr (kResidual) {
        float u[N];
        C::Unpack(w[b], u);
#pragma unroll
        for (int e = 0; e < N; ++e) v[e] += u[e];
        // Normalize the sum as rounded to T: the value that is returned.
        const Raw packed = C::Pack(v);
        C::Keep(z + j * N, packed);
        C::Unpack(packed, v);
      }
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float d = v[e] - shift;
        sum += d;
        sq = fmaf(d, d, sq);
      }
      cnt += float(N);
    }
  }
  const float inv_dim = 1.0f / float(dim);
  float centre = 0.0f, rstd;
  if constexpr (kLayer) {
    const float mean_t = cnt > 0.0f ? sum / cnt : 0.0f;
    const float3 m = RowMergeMeanM2(make_float3(cnt, mean_t, fmaxf(sq - sum * mean_t, 0.0f)), scratch);
    centre = m.y;
    rstd = rsqrtf(m.z * inv_dim + p.epsilon);
  } else {
    rstd = rsqrtf(RowSumOneBarrier(sq, scratch) * inv_dim + p.epsilon);
  }
  if (!live) return;
  SaveRowStats<kLayer>(p, row, shift + centre, rstd);

  const T* src = kResidual ? z : x;
  T* y = static_cast<T*>(p.y) + base;
  const int64_t prow = (row / p.shape.rows_per_group()) * dim;
  ByParamDtype<T>(p.params16, [&](auto params16) {
    for (int64_t j0 = threadIdx.x; j0 < n; j0 += int64_t(kBatch) * step) {
      Raw r[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int64_t j = j0 + int64_t(b) * step;
        if (j < n) {
          r[b] = kResidual ? C::LoadLast(src + j * N, true) : C::LoadLast(src + j * N, p.stream_rows);
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int64_t j = j0 + int64_t(b) * step;
        if (j >= n) continue;
        float v[N], sc[N], out[N];
        [[maybe_unused]] float bi[N];  // LayerNorm's
        C::Unpack(r[b], v);
        C::Params(p.scale, prow + j * N, params16, sc);
        if constexpr (kLayer) C::Params(p.bias, prow + j * N, params16, bi);
#pragma unroll
        for (int e = 0; e < N; ++e) {
          out[e] = ((v[e] - shift) - centre) * rstd * sc[e];
          if constexpr (kLayer) out[e] += bi[e];
        }
        C::Store(y + j * N, C::Pack(out), p.stream_rows);
      }
    }
  });
}

// dst[0..N) += v, in 16-byte accesses where N allows (a thread's chunks are
// N floats apart, so element accesses would conflict N ways).
template <int N>
__device__ inline void AddToShared(float* dst, const float* v) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int q = 0; q < N / 4; ++q) {
      float4 a = reinterpret_cast<float4*>(dst)[q];
      a.x += v[4 * q];
      a.y += v[4 * q + 1];
      a.z += v[4 * q + 2];
      a.w += v[4 * q + 3];
      reinterpret_cast<float4*>(dst)[q] = a;
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) dst[e] += v[e];
  }
}

// Backward. A block owns a contiguous run of rows of one group, like the
// ring kernel; thread t of a row slot owns the row's chunks t, t + blockDim.x,
// ... and adds their dscale/dbias partials into its slot's float32 rows of
// dynamic shared memory ([slots][2][columns], ChooseBwdStream), where no
// other thread touches them until the end. Per row, the first sweep reads dy
// and z for the row sums and the partials, the second reads them again for
// dx. At the end slot 0 adds the other slots' partials in slot order and
// writes the block's partial row.
// kCluster: rows whose partials outgrow one CTA's shared memory are split
// over a cluster of CTAs (sm_90), each owning a contiguous slice of the
// columns; per row the CTAs' sums meet through distributed shared memory and
// are added in rank order, so the row is still read once from DRAM.
template <typename T, bool kLayer, bool kResidual, bool kVec, bool kCluster = false>
__global__ void __launch_bounds__(kCluster ? 512 : 1024) NormBwdStreamKernel(NormBwdArgs p, BwdGrid grid) {
  using C = Chunk<T, kVec>;
  using Raw = typename C::Raw;
  constexpr int N = C::kElems;
  // Chunks a thread has in flight per sweep step: two 16-byte vectors of
  // each input keep the 1024-thread blocks within 64 registers; a cluster's
  // CTAs (at most 512 threads, four vectors each) load theirs at once; element
  // rows eight (four with a residual).
  constexpr int kBatch = kCluster ? 4 : kVec ? 2 : kResidual ? 4 : 8;
  extern __shared__ float4 acc_smem[];
  __shared__ float scratch[2][kStreamMaxSlots * 64];
  __shared__ float2 cta_sums[2];
  const int64_t dim = p.shape.dim, n = dim / N, rpg = p.shape.rows_per_group();
  int64_t slices = 1, rank = 0;
  if constexpr (kCluster) {
    slices = cooperative_groups::this_cluster().num_blocks();
    rank = cooperative_groups::this_cluster().block_rank();
  }
  const int64_t group = blockIdx.y, part = blockIdx.x / slices;
  const int64_t share = (n + slices - 1) / slices;  // chunks of this CTA's column slice
  const int64_t lo = min(n, rank * share), hi = min(n, lo + share);
  const int64_t first = group * rpg + part * grid.chunk;
  const int64_t last = min(first + grid.chunk, (group + 1) * rpg);
  const int64_t iters = last > first ? (last - first + blockDim.y - 1) / blockDim.y : 0;
  const T* dy_g = static_cast<const T*>(p.dy);
  const T* z_g = static_cast<const T*>(p.z);
  const int64_t scale_row = group * dim;  // this group's parameters' first column
  const int step = blockDim.x;
  const int64_t cols = share * N;  // partial columns per slot
  float* acc = reinterpret_cast<float*>(acc_smem);
  float* acc_s = acc + int64_t(threadIdx.y) * 2 * cols;
  float* acc_b = acc_s + cols;
  for (int64_t j = lo + threadIdx.x; j < hi; j += step) {
#pragma unroll
    for (int e = 0; e < N; ++e) acc_s[(j - lo) * N + e] = acc_b[(j - lo) * N + e] = 0.0f;
  }

  const float inv_dim = 1.0f / float(dim);
  // First sweep of row slot `it`: this thread's share of the row sums, and
  // its partials added in shared memory.
  auto sweep1 = [&](int64_t it) {
    const int64_t row = first + it * blockDim.y + threadIdx.y;
    const bool live = row < last;
    const int64_t base = live ? row * dim : 0;
    const float mean = (kLayer && live) ? p.mean[row] : 0.0f;
    const float rstd = live ? p.rstd[row] : 0.0f;
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t j0 = lo + threadIdx.x; live && j0 < hi; j0 += int64_t(kBatch) * step) {
      Raw dyr[kBatch], zr[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int64_t j = j0 + int64_t(b) * step;
        if (j < hi) {
          dyr[b] = C::Load(dy_g + base + j * N);
          zr[b] = C::Load(z_g + base + j * N);
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int64_t j = j0 + int64_t(b) * step;
        if (j >= hi) continue;
        float dy[N], zv[N], sc[N], ds[N];
        C::Unpack(dyr[b], dy);
        C::Unpack(zr[b], zv);
        C::Params(p.scale, scale_row + j * N, p.params16, sc);
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const float xhat = (zv[e] - mean) * rstd;
          const float g = dy[e] * sc[e];
          sum_g += g;
          sum_gx += g * xhat;
          ds[e] = dy[e] * xhat;
        }
        AddToShared<N>(acc_s + (j - lo) * N, ds);
        if constexpr (kLayer) AddToShared<N>(acc_b + (j - lo) * N, dy);
      }
    }
    // The block's row sums (one barrier; the scratch buffers alternate).
    float* sums = scratch[it & 1];
    return kLayer ? RowSum2OneBarrier(make_float2(sum_g, sum_gx), sums)
                  : make_float2(0.0f, RowSumOneBarrier(sum_gx, sums));
  };
  // Second sweep of row slot `it` given the whole row's sums: dx.
  auto sweep2 = [&](int64_t it, float2 t) {
    const int64_t row = first + it * blockDim.y + threadIdx.y;
    if (row >= last) return;
    const int64_t base = row * dim;
    const float mean = kLayer ? p.mean[row] : 0.0f;
    const float rstd = p.rstd[row];
    const float mg = t.x * inv_dim, mgx = t.y * inv_dim;
    for (int64_t j0 = lo + threadIdx.x; j0 < hi; j0 += int64_t(kBatch) * step) {
      Raw dyr[kBatch], zr[kBatch], dsr[kResidual ? kBatch : 1];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int64_t j = j0 + int64_t(b) * step;
        if (j < hi) {
          dyr[b] = C::LoadLast(dy_g + base + j * N, p.stream_rows);
          zr[b] = C::LoadLast(z_g + base + j * N, p.stream_rows);
          if constexpr (kResidual) {
            dsr[b] = C::LoadLast(static_cast<const T*>(p.dsum) + base + j * N, p.stream_rows);
          }
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int64_t j = j0 + int64_t(b) * step;
        if (j >= hi) continue;
        float dy[N], zv[N], sc[N], dx[N];
        C::Unpack(dyr[b], dy);
        C::Unpack(zr[b], zv);
        C::Params(p.scale, scale_row + j * N, p.params16, sc);
        if constexpr (kResidual) {
          C::Unpack(dsr[b], dx);
        } else {
#pragma unroll
          for (int e = 0; e < N; ++e) dx[e] = 0.0f;
        }
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const float xhat = (zv[e] - mean) * rstd;
          dx[e] += rstd * (dy[e] * sc[e] - mg - xhat * mgx);
        }
        C::Store(static_cast<T*>(p.dx) + base + j * N, C::Pack(dx), p.stream_rows);
      }
    }
  };

  if constexpr (!kCluster) {
    for (int64_t it = 0; it < iters; ++it) sweep2(it, sweep1(it));
  } else {
    // Software-pipelined over rows: row it's CTA sums are published (arrive)
    // before the second sweep of row it - 1 and read after it (wait), so the
    // cluster barrier's latency hides behind that sweep. A CTA rewrites its
    // slot it & 1 only after the barrier of row it - 1, which every peer
    // passes only once it has read row it - 2's slots.
    namespace cg = cooperative_groups;
    cg::cluster_group c = cg::this_cluster();
    float2 prev = make_float2(0.0f, 0.0f);
    for (int64_t it = 0; it <= iters; ++it) {
      if (it < iters) {
        const float2 t = sweep1(it);
        if (threadIdx.x == 0) cta_sums[it & 1] = t;
      }
      c.barrier_arrive();
      if (it > 0) sweep2(it - 1, prev);
      c.barrier_wait();
      if (it < iters) {
        prev = make_float2(0.0f, 0.0f);
        for (int r = 0; r < int(slices); ++r) {
          const float2 v = *c.map_shared_rank(&cta_sums[it & 1], r);
          prev.x += v.x;
          prev.y += v.y;
        }
      }
    }
  }

  if (blockDim.y > 1) __syncthreads();
  if (threadIdx.y != 0) return;
  float* out = p.partials + (group * (gridDim.x / slices) + part) * 2 * dim;
  for (int64_t j = lo + threadIdx.x; j < hi; j += step) {
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const int64_t c = (j - lo) * N + e;
      float s = acc_s[c], b = acc_b[c];
      for (int slot = 1; slot < int(blockDim.y); ++slot) {
        s += acc[int64_t(slot) * 2 * cols + c];
        if constexpr (kLayer) b += acc[int64_t(slot) * 2 * cols + cols + c];
      }
      out[j * N + e] = s;
      if constexpr (kLayer) out[dim + j * N + e] = b;
    }
  }
}

}  // namespace jaxdnn::norms
