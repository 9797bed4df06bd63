// Forward kernels. The vector kernel keeps its row in registers as packed
// 16-byte vectors (4 registers each, whatever the dtype): x (and the
// residual) are read once, the mean and the centred variance come from those
// registers, and y (and the residual sum z) are written once.
#pragma once

#include "common/cuda_vec.cuh"
#include "norms/problem.h"
#include "norms/sm80/norm_params.cuh"

namespace jaxdnn::norms {

// The statistics the backward recomputes from (one thread per row writes).
template <bool kLayer>
__device__ inline void SaveRowStats(const NormFwdArgs& p, int64_t row, float mean, float rstd) {
  if (threadIdx.x != 0) return;
  if constexpr (kLayer) p.mean[row] = mean;
  p.rstd[row] = rstd;
}

// The mean of a row's first 16-byte vector of the normalized input, the
// shift of the one-pass statistics (any value near the row's mean will do).
template <typename T, bool kResidual>
__device__ inline float RowShift(const NormFwdArgs& p, int64_t base) {
  using V = Vec16<T>;
  float a[V::kElems];
  V::Unpack(__ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) + base)), a);
  if constexpr (kResidual) {
    float b[V::kElems];
    V::Unpack(__ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(p.residual) + base)), b);
#pragma unroll
    for (int e = 0; e < V::kElems; ++e) a[e] += b[e];
  }
  float sum = 0.0f;
#pragma unroll
  for (int e = 0; e < V::kElems; ++e) sum += a[e];
  return sum * (1.0f / V::kElems);
}

// kKeepParams: scale and bias are read with an L1 evict-last hint (every row
// re-reads them; see norms/sm80/norm_launch.cu for where it pays).
// LayerNorm statistics: 16-bit rows take them in one pass about a shift
// (RowMeanM2Shifted, about 20% fewer instructions: bf16 82 -> 89% of copy at
// 32768x4096; docs/perf/norms.md, Standing decisions: One-pass shifted LN
// statistics).
// float32 rows keep the exact two-pass RowMeanM2: the one-pass M2 can lose
// up to ~dim * 2^-24 of itself when one element holds most of the variance,
// which float32 outputs would show but 16-bit ones (2^-8 rounding) cannot.
// Registers of the 16-bit LayerNorm rows of up to 4 vectors per thread: the
// kernel waits on its row's loads (ncu on an H200: about half of its stall
// cycles on L1TEX) and its 54 registers held 4096-wide rows to 9 blocks of
// 128 threads per SM and 8192-wide ones to 4 of 256; 48 (no spills) lets 10
// and 5 stay resident, more rows in flight. RMSNorm (49, and 91-95% of copy)
// and float32 rows (which would spill) keep the default. (Starting from 8
// vectors per thread instead, 128-thread rows, 64 registers, 8 blocks per SM,
// lost: 8192x8192 86% -> 78%; docs/perf/norms.md, Standing decisions: At most
// 4 vectors per thread.)
template <typename T, bool kLayer, int kVpt>
constexpr int FwdMaxRegisters() {
  return kLayer && sizeof(T) == 2 && kVpt <= 4 ? 48 : 128;
}

template <typename T, bool kLayer, bool kResidual, int kVpt, bool kKeepParams = false>
__global__ void __launch_bounds__(512) __maxnreg__((FwdMaxRegisters<T, kLayer, kVpt>()))
    NormFwdVecKernel(NormFwdArgs p) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  __shared__ float scratch[16 * 96];
  const int64_t dim = p.shape.dim;
  const int64_t nvec = dim / N;
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < p.shape.rows;
  const int64_t base = row * dim;

  uint4 raw[kVpt];
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
    raw[k] = (live && j < nvec) ? LoadRow(static_cast<const T*>(p.x) + base + j * N, p.stream_rows)
                                : make_uint4(0, 0, 0, 0);
  }
  if constexpr (kResidual) {
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      if (live && j < nvec) {
        float a[N], b[N];
        V::Unpack(raw[k], a);
        V::Unpack(LoadRow(static_cast<const T*>(p.residual) + base + j * N, p.stream_rows), b);
#pragma unroll
        for (int e = 0; e < N; ++e) a[e] += b[e];
        // Normalize the sum as rounded to T: the value that is returned.
        raw[k] = V::Pack(a);
        StoreRow(static_cast<T*>(p.z) + base + j * N, raw[k], p.stream_rows);
      }
    }
  }

  const float inv_dim = 1.0f / float(dim);
  // centre: what the output subtracts from the values in raw. It is the mean,
  // except for float32 LayerNorm, whose raw holds v - shift (below).
  float mean = 0.0f, centre = 0.0f, rstd;
  if constexpr (kLayer && sizeof(T) == 2) {
    // The shift: the mean of the row's first vector (of x + residual when
    // fused), read by every thread of the row (one broadcast line), so that
    // a single outlier moves it by 1/8 of its size.
    const float shift = live ? RowShift<T, kResidual>(p, base) : 0.0f;
    const float2 mm2 = RowMeanM2Shifted<T, kVpt>(raw, nvec, shift, inv_dim, scratch);
    mean = centre = mm2.x;
    rstd = rsqrtf(mm2.y * inv_dim + p.epsilon);
  } else if constexpr (kLayer) {
    // Exact two-pass mean and M2 per warp (shuffles only), merged across the
    // row's warps in one barrier round, of v - shift: with a large offset
    // (1e6 + N(0, 1)) the shifted values are exact and small, and the output
    // is (v - shift) - shifted mean, never v - mean (a float32 mean near 1e6
    // is itself 0.03 off). 16-bit rows cannot hold such offsets.
    const float shift = live ? RowShift<T, kResidual>(p, base) : 0.0f;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      float v[N];
      V::Unpack(raw[k], v);
#pragma unroll
      for (int e = 0; e < N; ++e) v[e] -= shift;
      raw[k] = V::Pack(v);
    }
    const float2 mm2 = RowMeanM2<T, kVpt>(raw, nvec, scratch);
    centre = mm2.x;
    mean = shift + mm2.x;
    rstd = rsqrtf(mm2.y * inv_dim + p.epsilon);
  } else {
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      float v[N];
      V::Unpack(raw[k], v);
#pragma unroll
      for (int e = 0; e < N; ++e) sq += v[e] * v[e];
    }
    // One reduction per block: one barrier.
    rstd = rsqrtf(RowSumOneBarrier(sq, scratch) * inv_dim + p.epsilon);
  }
  if (!live) return;
  SaveRowStats<kLayer>(p, row, mean, rstd);

  const int64_t prow = (row / p.shape.rows_per_group()) * dim;
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
    if (j >= nvec) continue;
    float v[N], out[N];
    V::Unpack(raw[k], v);
#pragma unroll
    for (int q = 0; q < N / 4; ++q) {
      const float4 s4 = LoadParam4<T, kKeepParams>(p.scale, prow + j * N + 4 * q, p.params16);
      const float sc[4] = {s4.x, s4.y, s4.z, s4.w};
      float bi[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if constexpr (kLayer) {
        const float4 b4 = LoadParam4<T, kKeepParams>(p.bias, prow + j * N + 4 * q, p.params16);
        bi[0] = b4.x;
        bi[1] = b4.y;
        bi[2] = b4.z;
        bi[3] = b4.w;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) out[4 * q + e] = (v[4 * q + e] - centre) * rstd * sc[e] + bi[e];
    }
    StoreRow(static_cast<T*>(p.y) + base + j * N, V::Pack(out), p.stream_rows);
  }
}

}  // namespace jaxdnn::norms
