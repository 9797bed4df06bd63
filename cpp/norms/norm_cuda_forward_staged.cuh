// Forward with the parameters staged in shared memory (opt-in,
// JAXDNN_NORM_FWD=staged, until timed on a GPU).
//
// Why: the v7 row kernel (norm_cuda_forward.cuh) re-reads its float32 scale
// (and bias) slice for every row: 16 KB (RMSNorm) or 32 KB (LayerNorm) per
// 8 KB bf16 row of 4096. ncu on an H200 put L2 throughput at 85-88% while
// DRAM sat at 73% (LayerNorm) / 82% (RMSNorm), with a third to a fifth of those
// reads missing L1: the parameter reloads compete with the rows for L2.
// Here a persistent block copies the parameter row into shared memory once
// and then walks rows with the v7 per-row code (a row in registers as packed
// 16-byte vectors, kVpt = 4 per thread, exact mean/M2 merged in one barrier
// round), so the only L2 traffic left is x and y.
//
// Layout: one parameter row shared by every row (groups == 1), rows of
// 128..2048 16-byte vectors in multiples of 128, so that every thread holds
// exactly 4 vectors (no tail guards) and a block of 512 threads spans
// 512 / (nvec / 4) rows. Shared parameters are stored [quad][vector] (quad q of
// vector j at q * nvec + j), so a warp's 16-byte reads of one quad are
// consecutive and conflict-free.
#pragma once

#include "common/cuda_vec.cuh"
#include "norms/norm_cuda_forward.cuh"
#include "norms/norm_problem.h"

namespace jaxdnn::norms {

constexpr int kStagedVpt = 4;
constexpr int kStagedBlockThreads = 512;

// Dynamic shared memory of the staged forward: the parameter row(s) as float32.
inline size_t StagedFwdSmemBytes(int64_t dim, bool layer) {
  return size_t(dim) * sizeof(float) * (layer ? 2 : 1);
}

template <typename T, bool kLayer, bool kResidual>
__global__ void __launch_bounds__(kStagedBlockThreads, 2)  // two blocks per SM: as many threads as v7
    NormFwdStagedKernel(NormFwdArgs p) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  constexpr int kQuads = N / 4;  // float4 parameter reads per vector
  constexpr int kVpt = kStagedVpt;
  // Two scratch buffers, alternated by iteration: a thread can only write
  // iteration i + 2's buffer after every thread passed iteration i + 1's
  // barrier, i.e. finished reading iteration i's (RowMeanM2 has no trailing
  // barrier of its own).
  __shared__ float scratch[2][16 * 96];
  extern __shared__ float4 params_smem[];
  const int64_t dim = p.shape.dim;
  const int64_t nvec = dim / N;
  float4* scale_s = params_smem;
  float4* bias_s = params_smem + dim / 4;

  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int nthreads = blockDim.x * blockDim.y;
  for (int64_t i = tid; i < dim / 4; i += nthreads) {
    const int64_t slot = (i % kQuads) * nvec + i / kQuads;
    scale_s[slot] = LoadParam(p.scale + 4 * i);
    if constexpr (kLayer) bias_s[slot] = LoadParam(p.bias + 4 * i);
  }
  __syncthreads();

  const float inv_dim = 1.0f / float(dim);
  const int64_t row_stride = int64_t(gridDim.x) * blockDim.y;
  int parity = 0;
  for (int64_t row0 = int64_t(blockIdx.x) * blockDim.y; row0 < p.shape.rows;
       row0 += row_stride, parity ^= 1) {
    const int64_t row = row0 + threadIdx.y;
    const bool live = row < p.shape.rows;
    const int64_t base = row * dim;
    uint4 raw[kVpt];
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      raw[k] = live ? LoadStream(static_cast<const T*>(p.x) + base + j * N) : make_uint4(0, 0, 0, 0);
    }
    if constexpr (kResidual) {
      if (live) {
#pragma unroll
        for (int k = 0; k < kVpt; ++k) {
          const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
          float a[N], b[N];
          V::Unpack(raw[k], a);
          V::Unpack(LoadStream(static_cast<const T*>(p.residual) + base + j * N), b);
#pragma unroll
          for (int e = 0; e < N; ++e) a[e] += b[e];
          raw[k] = V::Pack(a);  // normalize the sum as rounded to T, as returned
          StoreStream(static_cast<T*>(p.z) + base + j * N, raw[k]);
        }
      }
    }
    float mean = 0.0f, rstd;
    if constexpr (kLayer) {
      const float2 mm2 = RowMeanM2<T, kVpt>(raw, nvec, scratch[parity]);
      mean = mm2.x;
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
      rstd = rsqrtf(RowSum(sq, scratch[parity]) * inv_dim + p.epsilon);
    }
    if (!live) continue;
    SaveRowStats<kLayer>(p, row, mean, rstd);
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      float v[N], out[N];
      V::Unpack(raw[k], v);
#pragma unroll
      for (int q = 0; q < kQuads; ++q) {
        const float4 s4 = scale_s[q * nvec + j];
        const float sc[4] = {s4.x, s4.y, s4.z, s4.w};
        float bi[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if constexpr (kLayer) {
          const float4 b4 = bias_s[q * nvec + j];
          bi[0] = b4.x; bi[1] = b4.y; bi[2] = b4.z; bi[3] = b4.w;
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) out[4 * q + e] = (v[4 * q + e] - mean) * rstd * sc[e] + bi[e];
      }
      StoreStream(static_cast<T*>(p.y) + base + j * N, V::Pack(out));
    }
  }
}

}  // namespace jaxdnn::norms
