// The tensor-core step product of the persistent recurrences (16-bit
// weights, rnn_plan.h): red[part][b][col] = partial sums over the k steps
// of `part` of x[b][k] * W[k][col], with mma.sync m16n8k16 (sm_80 and
// later): the staged rows x as A (row-major, rounded to the weights'
// dtype), the CTA's slice as B in fragment order, float32 accumulation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "recurrent/sm80/rnn_device.cuh"

namespace jaxdnn::recurrent {

// d += a * b for one m16n8k16 tile (a: 4 registers of 2 elements, b: 2).
__device__ __forceinline__ void MmaTile(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1, __nv_bfloat16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void MmaTile(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1, __half) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <typename WT>
__device__ __forceinline__ uint32_t PackPair(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t PackPair<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t PackPair<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Rows [b0, b0 + rows) of src [batch][k] (float32, written by other CTAs:
// read through L2), columns of chunk kc (k from kc * chunk_steps * 16, that
// many steps' worth), into the first rows of the tile x [batch_tile]
// [x_stride] in WT, zeros past k. The tile's later rows keep what they held
// (zeros from ZeroTile, or an earlier tile's or chunk's rows): the product
// reads them (its m16 tiles cover 16 * MT rows), but an output row depends
// on its own input row alone, and output rows past `rows` are never read.
template <typename WT>
__device__ __forceinline__ void StageRowsMma(const float* __restrict__ src, int b0, int rows, int kc,
                                             const RnnShape& s, WT* x) {
  const int kp4 = s.chunk_steps * 4;  // 4-element groups of a chunk's row
  const int k0 = kc * s.chunk_steps * 16;
  if ((s.k & 3) == 0) {
    CopyInFlight<kStageInFlight>(
        rows, kp4,
        [&](int b, int c) {
          const int k = k0 + 4 * c;
          return k < s.k ? __ldcg(reinterpret_cast<const uint4*>(src + int64_t(b0 + b) * s.k + k))
                         : make_uint4(0u, 0u, 0u, 0u);
        },
        [&](int, int b, int c, uint4 u) {
          const float4 v = *reinterpret_cast<const float4*>(&u);
          *reinterpret_cast<uint2*>(x + b * int(s.x_stride) + 4 * c) =
              make_uint2(PackPair<WT>(v.x, v.y), PackPair<WT>(v.z, v.w));
        });
  } else {
    ForRowsCols(rows, kp4, [&](int, int b, int c) {
      const int kr = 4 * c, k = k0 + kr;
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = k + e < s.k ? __ldcg(src + int64_t(b0 + b) * s.k + k + e) : 0.0f;
      *reinterpret_cast<uint2*>(x + b * int(s.x_stride) + kr) =
          make_uint2(PackPair<WT>(v[0], v[1]), PackPair<WT>(v[2], v[3]));
    });
  }
}

// The same from rows already in WT (the exchange written in the weights'
// dtype by the producing CTAs): copies, 16 bytes at a time where k allows.
template <typename WT>
__device__ __forceinline__ void StageRowsMma(const WT* __restrict__ src, int b0, int rows, int kc,
                                             const RnnShape& s, WT* x) {
  const int k0 = kc * s.chunk_steps * 16;
  if ((s.k & 7) == 0) {
    // cp.async (through L2, .cg: other CTAs wrote the rows), every copy in
    // flight at once and no registers held; TileProduct waits for them.
    const int kp8 = int(s.chunk_steps) * 2;  // 8-element groups of a chunk's row
    ForRowsCols(rows, kp8, [&](int, int b, int c) {
      const int k = k0 + 8 * c;
      const bool in = k < s.k;
      CpAsync16(x + b * int(s.x_stride) + 8 * c, src + int64_t(b0 + b) * s.k + (in ? k : 0), in ? 16 : 0);
    });
  } else {
    const unsigned short* from = reinterpret_cast<const unsigned short*>(src);
    unsigned short* to = reinterpret_cast<unsigned short*>(x);
    ForRowsCols(rows, int(s.chunk_steps) * 16, [&](int, int b, int kr) {
      const int k = k0 + kr;
      to[b * int(s.x_stride) + kr] = k < s.k ? __ldcg(from + int64_t(b0 + b) * s.k + k) : (unsigned short)0;
    });
  }
}

// Zeros in the whole tile (once, before the first step).
template <typename WT>
__device__ __forceinline__ void ZeroTile(const RnnShape& s, WT* x) {
  uint4* v = reinterpret_cast<uint4*>(x);
  const int n = int(int64_t(s.batch_tile) * s.x_stride * sizeof(WT) / 16);
  for (int i = threadIdx.x; i < n; i += blockDim.x) v[i] = make_uint4(0u, 0u, 0u, 0u);
}

// One k step (relative to the staged chunk) of every m16 tile into acc:
// xr is the lane's A position in row 0, b its B fragment of the step.
template <int MT, typename WT>
__device__ __forceinline__ void MmaStep(float (&acc)[MT][4], const WT* xr, int ks, uint2 b,
                                        const RnnShape& s) {
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    const WT* r0 = xr + (16 * m) * s.x_stride + 16 * ks;
    const WT* r1 = r0 + 8 * s.x_stride;
    MmaTile(acc[m], *reinterpret_cast<const uint32_t*>(r0), *reinterpret_cast<const uint32_t*>(r1),
            *reinterpret_cast<const uint32_t*>(r0 + 8), *reinterpret_cast<const uint32_t*>(r1 + 8), b.x, b.y,
            WT());
  }
}

// The product for a tile of 16 * MT rows: warps take (n tile, k part) jobs;
// lane (g = lane / 4, t = lane % 4) holds C rows g and g + 8 of each m tile,
// columns 2t and 2t + 1 of its n tile. w: the slice, [n_tile][k_step][32]
// 8-byte B fragments (shared memory or the workspace).
template <int MT, typename WT>
__device__ __forceinline__ void MmaProduct(const WT* __restrict__ w, const WT* x, int kc, const RnnShape& s,
                                           float* red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  // Chunk kc's k steps [ks0, ks0 + nks); x holds them from column 0.
  const int ks0 = kc * s.chunk_steps, nks = min(s.chunk_steps, s.k_steps - ks0);
  const uint2* wf = reinterpret_cast<const uint2*>(w) + int64_t(ks0) * 32;
  for (int job = warp; job < s.n_tiles * s.k_parts; job += kRnnWarps) {
    const int nt = job % s.n_tiles, part = job / s.n_tiles;
    // Two accumulators a tile, alternate k steps in each (two independent
    // mma chains: a one-tile product is latency-bound), added at the end.
    float acc[MT][4], acc2[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][e] = acc2[m][e] = 0.0f;
    const uint2* wb = wf + int64_t(nt) * s.k_steps * 32 + lane;
    const WT* xr = x + g * s.x_stride + 2 * t;
    int ks = part;
    for (; ks + s.k_parts < nks; ks += 2 * s.k_parts) {
      MmaStep(acc, xr, ks, wb[int64_t(ks) * 32], s);
      MmaStep(acc2, xr, ks + s.k_parts, wb[int64_t(ks + s.k_parts) * 32], s);
    }
    if (ks < nks) MmaStep(acc, xr, ks, wb[int64_t(ks) * 32], s);
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][e] += acc2[m][e];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float* r = red + ((kc * s.k_parts + part) * s.batch_tile + 16 * m + g) * s.red_stride + 8 * nt + 2 * t;
      r[0] = acc[m][0];
      r[1] = acc[m][1];
      r += 8 * s.red_stride;
      r[0] = acc[m][2];
      r[1] = acc[m][3];
    }
  }
}

// The product of chunk kc over the m16 tiles holding `rows` rows.
template <typename WT>
__device__ __forceinline__ void MmaProductTile(const WT* w, const WT* x, int rows, int kc, const RnnShape& s,
                                               float* red) {
  if (rows <= 16) {
    MmaProduct<1>(w, x, kc, s, red);
  } else if (rows <= 32) {
    MmaProduct<2>(w, x, kc, s, red);
  } else {
    MmaProduct<4>(w, x, kc, s, red);
  }
}

// A tile's step product on the plan's path, its rows staged first: on the
// FMA path from src (float32 [batch][k]); on the mma path chunk by chunk of
// k, from src16 (the exchange in the weights' dtype) where given, else from
// src. Returns with red complete and the block synchronized.
template <typename WT>
__device__ __forceinline__ void TileProduct(const WT* w, const float* src, const WT* src16, int b0, int rows,
                                            const RnnShape& s, char* smem, float* red) {
  if constexpr (sizeof(WT) == 2) {
    if (s.mma) {
      WT* x = reinterpret_cast<WT*>(smem + s.smem_a);
      for (int kc = 0; kc < s.k_chunks; ++kc) {
        if (kc > 0) __syncthreads();  // the last chunk's product has read x
        if (src16 != nullptr) {
          StageRowsMma(src16, b0, rows, kc, s, x);
        } else {
          StageRowsMma(src, b0, rows, kc, s, x);
        }
        CpAsyncWaitAll();  // the staging's copies and the caller's (StageOwn)
        __syncthreads();
        MmaProductTile(w, x, rows, kc, s, red);
      }
      __syncthreads();
      return;
    }
  }
  float* a = reinterpret_cast<float*>(smem + s.smem_a);
  StageRows(src, b0, rows, s, a);
  CpAsyncWaitAll();  // the caller's copies (StageOwn)
  __syncthreads();
  SliceProductRows(w, a, rows, s, red);
  __syncthreads();
}

}  // namespace jaxdnn::recurrent
