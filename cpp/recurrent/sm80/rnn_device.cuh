// Device blocks the persistent recurrences share (rnn_plan.h says the
// shapes): the step barrier, the weight slicing, the staging of a tile of
// exchanged rows, and the slice product.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cuda/atomic>

#include "common/row_col.cuh"
#include "common/sm80/cp_async.cuh"
#include "recurrent/sm80/rnn_plan.h"

namespace jaxdnn::recurrent {

// The plan's numbers a kernel reads (ints: every size is far below 2^31
// except the offsets, which stay 64-bit).
struct RnnShape {
  int steps, batch, hidden, gates;
  int units, unit_ctas, group_rows, cols, col_groups, rounds, k, k_parts, batch_tile;
  int resident, mma, n_tiles, k_steps, chunk_steps, k_chunks, x_stride, red_stride;
  int64_t smem_a, smem_red, smem_bias, smem_extra;
};

// A CTA's place in the grid: its slice of the units (unit block), and the
// rows of its batch group [RowBegin, RowEnd) (the whole batch with one group).
__device__ __forceinline__ int UnitBlock(const RnnShape& s) { return int(blockIdx.x) % s.unit_ctas; }
__device__ __forceinline__ int RowBegin(const RnnShape& s) {
  return int(blockIdx.x) / s.unit_ctas * s.group_rows;
}
__device__ __forceinline__ int RowEnd(const RnnShape& s) { return min(s.batch, RowBegin(s) + s.group_rows); }

inline RnnShape ShapeOf(const RnnCudaPlan& p, int64_t steps) {
  RnnShape s;
  s.steps = int(steps);
  s.batch = int(p.batch);
  s.hidden = int(p.hidden);
  s.gates = int(p.gates);
  s.units = int(p.units);
  s.unit_ctas = int(p.unit_ctas);
  s.group_rows = int(p.group_rows);
  s.cols = int(p.cols);
  s.col_groups = int(p.col_groups);
  s.rounds = int(p.rounds);
  s.k = int(p.k);
  s.k_parts = int(p.k_parts);
  s.batch_tile = int(p.batch_tile);
  s.resident = p.resident ? 1 : 0;
  s.mma = p.mma ? 1 : 0;
  s.n_tiles = int(p.n_tiles);
  s.k_steps = int(p.k_steps);
  s.chunk_steps = int(p.chunk_steps);
  s.k_chunks = int(p.k_chunks);
  s.x_stride = int(p.x_stride);
  s.red_stride = int(p.red_stride);
  s.smem_a = p.smem_a;
  s.smem_red = p.smem_red;
  s.smem_bias = p.smem_bias;
  s.smem_extra = p.smem_extra;
  return s;
}

// Every CTA of the grid arrives; returns once all have arrived `target /
// gridDim.x` times in total. The counter starts at 0 (zeroed before the
// launch); rows other CTAs wrote before arriving are then read with __ldcg
// (L2), never through a possibly stale L1 line.
__device__ __forceinline__ void GridBarrier(unsigned int* counter, unsigned int target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    cuda::atomic_ref<unsigned int, cuda::thread_scope_device> c(*counter);
    c.fetch_add(1u, cuda::memory_order_release);
    while (c.load(cuda::memory_order_acquire) < target) __nanosleep(32);
  }
  __syncthreads();
}

template <typename WT>
__device__ __forceinline__ WT FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

// Four consecutive weights as floats.
__device__ __forceinline__ float4 Load4(const float* w) { return *reinterpret_cast<const float4*>(w); }
__device__ __forceinline__ float4 Load4(const __nv_bfloat16* w) {
  const uint2 raw = *reinterpret_cast<const uint2*>(w);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ float4 Load4(const __half* w) {
  const uint2 raw = *reinterpret_cast<const uint2*>(w);
  const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
  const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// Writes every CTA's weight slice from w_hh [H][G*H] (zeros past the
// problem): FMA [cta][col_group][round][lane][4] (column 4 * col_group + e,
// k = lane + 32 * round); mma [cta][n_tile][k_step][lane][4], each lane's B
// fragment of m16n8k16 (column 8 * n_tile + lane / 4, k = 16 * k_step +
// 2 * (lane % 4) + (e & 1) + 8 * (e / 2)). Forward column col of CTA c is
// gate col / units of unit c * units + col % units, its k a row of w_hh;
// backward column col is unit c * units + col and its k a column of w_hh.
template <typename WT>
__global__ void SliceWeights(const float* __restrict__ w_hh, WT* __restrict__ slices, RnnShape s,
                             int backward, int64_t total) {
  const int64_t gh = int64_t(s.gates) * s.hidden;
  const int64_t inner = s.mma ? int64_t(s.k_steps) : int64_t(s.rounds);
  const int64_t outer = s.mma ? int64_t(s.n_tiles) : int64_t(s.col_groups);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int e = int(i % 4), lane = int(i / 4 % 32);
    const int64_t r = i / 128 % inner, cg = i / (128 * inner) % outer;
    const int64_t c = i / (128 * inner * outer);
    int64_t k, col;
    if (s.mma) {
      col = 8 * cg + lane / 4;
      k = 16 * r + 2 * (lane % 4) + (e & 1) + 8 * (e / 2);
    } else {
      col = 4 * cg + e;
      k = lane + 32 * r;
    }
    float v = 0.0f;
    if (col < s.cols && k < s.k) {
      if (backward) {
        const int64_t u = c * s.units + col;
        if (u < s.hidden) v = w_hh[u * gh + k];
      } else {
        const int64_t g = col / s.units, u = c * s.units + col % s.units;
        if (u < s.hidden) v = w_hh[k * gh + g * s.hidden + u];
      }
    }
    slices[i] = FromFloat<WT>(v);
  }
}

// The 16-byte vectors of a rows x cols grid, vector (r, c) from load(r, c)
// into store(i, r, c, v), each thread keeping kInFlight loads in flight: a
// plain loop waits one L2 round trip a vector (the store needs the load).
template <int kInFlight, typename Load, typename Store>
__device__ __forceinline__ void CopyInFlight(int rows, int cols, Load load, Store store) {
  const int n = rows * cols;
  if (n <= 0) return;
  RowCol rc(cols);
  for (int base = threadIdx.x; base < n; base += kInFlight * blockDim.x) {
    uint4 v[kInFlight];
    RowCol at = rc;
#pragma unroll
    for (int j = 0; j < kInFlight; ++j, at.Next())
      v[j] = base + j * int(blockDim.x) < n ? load(at.r, at.c) : uint4{};
    at = rc;
#pragma unroll
    for (int j = 0; j < kInFlight; ++j, at.Next()) {
      const int i = base + j * int(blockDim.x);
      if (i < n) store(i, at.r, at.c, v[j]);
    }
    rc = at;
  }
}

constexpr int kStageInFlight = 8;

// Copies rows [b0, b0 + rows) of src [batch][k] into a [batch_tile][rounds
// * 32] tile, zeros past k and past the rows (the product then needs no
// bounds). Rows other CTAs wrote are read through L2 (__ldcg).
__device__ __forceinline__ void StageRows(const float* __restrict__ src, int b0, int rows, const RnnShape& s,
                                          float* a) {
  const int kp = s.rounds * 32;
  if ((s.k & 3) == 0) {
    CopyInFlight<kStageInFlight>(
        int(s.batch_tile), kp / 4,
        [&](int b, int c) {
          const int k = 4 * c;
          return b < rows && k < s.k ? __ldcg(reinterpret_cast<const uint4*>(src + int64_t(b0 + b) * s.k + k))
                                     : make_uint4(0u, 0u, 0u, 0u);
        },
        [&](int i, int, int, uint4 v) { reinterpret_cast<uint4*>(a)[i] = v; });
  } else {
    ForRowsCols(int(s.batch_tile), kp, [&](int i, int b, int k) {
      a[i] = (b < rows && k < s.k) ? __ldcg(src + int64_t(b0 + b) * s.k + k) : 0.0f;
    });
  }
}

// The slice product for one tile of BB rows: red[part][b][col] = partial
// sums of a[b][k] * W[k][col] over the k rounds of `part`; SumParts then
// adds the parts in order. W is the CTA's slice ([col_group][round][32][4]).
template <int BB, typename WT>
__device__ __forceinline__ void SliceProduct(const WT* __restrict__ w, const float* a, const RnnShape& s,
                                             float* red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int kp = s.rounds * 32, cols4 = s.red_stride;
  for (int job = warp; job < s.col_groups * s.k_parts; job += kRnnWarps) {
    const int cg = job % s.col_groups, part = job / s.col_groups;
    float acc[4][BB];
#pragma unroll
    for (int e = 0; e < 4; ++e)
#pragma unroll
      for (int b = 0; b < BB; ++b) acc[e][b] = 0.0f;
    const WT* wc = w + (int64_t(cg) * s.rounds * 32 + lane) * 4;
    for (int r = part; r < s.rounds; r += s.k_parts) {
      const float4 wv = Load4(wc + int64_t(r) * 128);
      const int k = lane + 32 * r;
#pragma unroll
      for (int b = 0; b < BB; ++b) {
        const float av = a[b * kp + k];
        acc[0][b] = fmaf(av, wv.x, acc[0][b]);
        acc[1][b] = fmaf(av, wv.y, acc[1][b]);
        acc[2][b] = fmaf(av, wv.z, acc[2][b]);
        acc[3][b] = fmaf(av, wv.w, acc[3][b]);
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e)
#pragma unroll
      for (int b = 0; b < BB; ++b) {
        float v = acc[e][b];
#pragma unroll
        for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) red[(part * s.batch_tile + b) * cols4 + cg * 4 + e] = v;
      }
  }
}

// The product for rows b < rows of the tile (BB the smallest of 1, 2, 4, 8
// holding them; the tile's rows past `rows` are zeros).
template <typename WT>
__device__ __forceinline__ void SliceProductRows(const WT* w, const float* a, int rows, const RnnShape& s,
                                                 float* red) {
  if (rows <= 1) {
    SliceProduct<1>(w, a, s, red);
  } else if (rows <= 2) {
    SliceProduct<2>(w, a, s, red);
  } else if (rows <= 4) {
    SliceProduct<4>(w, a, s, red);
  } else {
    SliceProduct<8>(w, a, s, red);
  }
}

// The full sum for row b, column col: the parts added in order.
__device__ __forceinline__ float SumParts(const float* red, int b, int col, const RnnShape& s) {
  float v = 0.0f;
  const int parts = s.k_parts * s.k_chunks;
  for (int part = 0; part < parts; ++part) v += red[(part * s.batch_tile + b) * s.red_stride + col];
  return v;
}

// The CTA's weights: its slice copied into shared memory (resident), or
// where it lies in the workspace.
template <typename WT>
__device__ __forceinline__ const WT* LoadSlice(const WT* __restrict__ slices, const RnnShape& s, char* smem) {
  const int64_t elems = s.mma ? int64_t(s.n_tiles) * s.k_steps * 128 : int64_t(s.col_groups) * s.rounds * 128;
  const WT* mine = slices + UnitBlock(s) * elems;
  if (!s.resident) return mine;
  const int64_t vecs = elems * sizeof(WT) / 16;  // 128 elements: whole 16-byte vectors
  const uint4* from = reinterpret_cast<const uint4*>(mine);
  uint4* to = reinterpret_cast<uint4*>(smem);
  for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) to[i] = from[i];
  return reinterpret_cast<const WT*>(smem);
}

__device__ __forceinline__ float Sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

// tanh through one exp, as the CPU kernel's: the build's fast math turns
// tanhf into tanh.approx.f32 (relative error ~5e-4), too coarse for float32.
__device__ __forceinline__ float Tanh(float v) {
  const float e = __expf(-2.0f * fabsf(v));
  return copysignf((1.0f - e) / (1.0f + e), v);
}

}  // namespace jaxdnn::recurrent
