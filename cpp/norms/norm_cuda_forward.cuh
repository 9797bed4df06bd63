// Forward kernels. The vector kernel keeps its row in registers: x (and the
// residual) are read once, the mean and the centred variance come from those
// registers, and y (and the residual sum z) are written once.
#pragma once

#include "common/cuda_vec.cuh"
#include "norms/norm_problem.h"

namespace jaxdnn::norms {

template <typename T, bool kLayer, bool kResidual, int kVpt>
__global__ void __launch_bounds__(512) NormFwdVecKernel(NormFwdArgs p) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  __shared__ float scratch[32 * 96];
  const int64_t dim = p.shape.dim;
  const int64_t nvec = dim / N;
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < p.shape.rows;
  const int64_t base = row * dim;

  float v[kVpt][N];
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
    if (live && j < nvec) {
      V::Unpack(LoadStream(static_cast<const T*>(p.x) + base + j * N), v[k]);
      if constexpr (kResidual) {
        float r[N];
        V::Unpack(LoadStream(static_cast<const T*>(p.residual) + base + j * N), r);
#pragma unroll
        for (int e = 0; e < N; ++e) r[e] += v[k][e];
        // Normalize the sum as rounded to T, the value that is returned.
        const uint4 packed = V::Pack(r);
        StoreStream(static_cast<T*>(p.z) + base + j * N, packed);
        V::Unpack(packed, v[k]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) v[k][e] = 0.0f;
    }
  }

  const float inv_dim = 1.0f / float(dim);
  float mean = 0.0f, rstd;
  if constexpr (kLayer) {
    // Per-thread mean and M2 from registers, merged across the row in one
    // reduction (one barrier round instead of a mean pass then a variance pass).
    float cnt = 0.0f, s = 0.0f;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      if (threadIdx.x + int64_t(k) * blockDim.x < nvec) {
        cnt += float(N);
#pragma unroll
        for (int e = 0; e < N; ++e) s += v[k][e];
      }
    }
    const float local_mean = cnt > 0.0f ? s / cnt : 0.0f;
    float m2 = 0.0f;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const bool valid = threadIdx.x + int64_t(k) * blockDim.x < nvec;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float d = valid ? v[k][e] - local_mean : 0.0f;
        m2 += d * d;
      }
    }
    const MeanM2 row_stats = RowMerge({cnt, local_mean, m2}, scratch);
    mean = row_stats.mean;
    rstd = rsqrtf(row_stats.m2 * inv_dim + p.epsilon);
  } else {
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < kVpt; ++k)
#pragma unroll
      for (int e = 0; e < N; ++e) sq += v[k][e] * v[k][e];
    rstd = rsqrtf(RowSum(sq, scratch) * inv_dim + p.epsilon);
  }
  if (!live) return;
  if (threadIdx.x == 0) {
    if constexpr (kLayer) p.mean[row] = mean;
    p.rstd[row] = rstd;
  }

  const int64_t prow = (row / p.shape.rows_per_group()) * dim;
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
    if (j >= nvec) continue;
    float out[N];
#pragma unroll
    for (int q = 0; q < N / 4; ++q) {
      const float4 s4 = LoadParam(p.scale + prow + j * N + 4 * q);
      const float sc[4] = {s4.x, s4.y, s4.z, s4.w};
      float bi[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if constexpr (kLayer) {
        const float4 b4 = LoadParam(p.bias + prow + j * N + 4 * q);
        bi[0] = b4.x; bi[1] = b4.y; bi[2] = b4.z; bi[3] = b4.w;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) out[4 * q + e] = (v[k][4 * q + e] - mean) * rstd * sc[e] + bi[e];
    }
    StoreStream(static_cast<T*>(p.y) + base + j * N, V::Pack(out));
  }
}

// Scalar path for rows that are not 16-byte vectors (odd widths, unaligned
// views): three sweeps over the row, the later two hitting cache.
template <typename T, bool kLayer, bool kResidual>
__global__ void __launch_bounds__(256) NormFwdScalarKernel(NormFwdArgs p) {
  using V = Vec16<T>;
  __shared__ float scratch[32 * 32];
  const int64_t dim = p.shape.dim;
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < p.shape.rows;
  const int64_t base = row * dim;
  const T* x = static_cast<const T*>(p.x);
  const T* src = kResidual ? static_cast<const T*>(p.z) : x;

  float s = 0.0f;
  if (live) {
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      float v = V::Load1(x + base + j);
      if constexpr (kResidual) {
        T* z = static_cast<T*>(p.z) + base + j;
        V::Store1(z, v + V::Load1(static_cast<const T*>(p.residual) + base + j));
        v = V::Load1(z);
      }
      s += v;
    }
  }
  const float inv_dim = 1.0f / float(dim);
  const float mean = kLayer ? RowSum(s, scratch) * inv_dim : 0.0f;
  float sq = 0.0f;
  if (live) {
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const float d = V::Load1(src + base + j) - mean;
      sq += d * d;
    }
  }
  const float rstd = rsqrtf(RowSum(sq, scratch) * inv_dim + p.epsilon);
  if (!live) return;
  if (threadIdx.x == 0) {
    if constexpr (kLayer) p.mean[row] = mean;
    p.rstd[row] = rstd;
  }
  const int64_t prow = (row / p.shape.rows_per_group()) * dim;
  T* y = static_cast<T*>(p.y);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    float out = (V::Load1(src + base + j) - mean) * rstd * p.scale[prow + j];
    if constexpr (kLayer) out += p.bias[prow + j];
    V::Store1(y + base + j, out);
  }
}

}  // namespace jaxdnn::norms
