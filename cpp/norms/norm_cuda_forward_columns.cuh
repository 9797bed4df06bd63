// Column-stationary forward for wide rows without grouped parameters. The
// v7 forward reloads a thread's float32 scale (and bias) slice for every row:
// 4x (LayerNorm) the bytes of the row itself through L1/L2, which ncu showed
// as L2 85% / L1 75% busy while DRAM sat at 73% (results/*ncu-norms*). Here a
// block spans a whole row with one 16-byte vector per thread, keeps that
// thread's parameters in registers for every row it visits, and takes kRows
// rows per step (their loads all in flight together) from a persistent grid.
#pragma once

#include "common/cuda_vec.cuh"
#include "norms/norm_problem.h"

namespace jaxdnn::norms {

// Sums each of kRows values over the block (one row per value), in a fixed
// order: warps reduce with shuffles, then warp k adds row k's warp partials.
// `scratch` holds kRows * 33 floats. Every thread must call it.
template <int kRows>
__device__ inline void BlockSumRows(float (&v)[kRows], float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    const float w = WarpSum(v[k]);
    if (lane == 0) scratch[k * 33 + warp] = w;
  }
  __syncthreads();
  if (warp < kRows) {
    float t = lane < warps ? scratch[warp * 33 + lane] : 0.0f;
    t = WarpSum(t);
    if (lane == 0) scratch[warp * 33 + 32] = t;
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kRows; ++k) v[k] = scratch[k * 33 + 32];
  __syncthreads();  // the scratch is reused by the next call
}

template <typename T, bool kLayer, bool kResidual, int kRows>
__global__ void __launch_bounds__(1024, 1) NormFwdColumnKernel(NormFwdArgs p) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  __shared__ float scratch[kRows * 33];
  const int64_t dim = p.shape.dim, nvec = dim / N, rows = p.shape.rows;
  const int64_t j = threadIdx.x;  // this thread's vector of every row
  const bool mine = j < nvec;
  const T* x = static_cast<const T*>(p.x);

  float sc[N], bi[N];
#pragma unroll
  for (int q = 0; q < N / 4; ++q) {
    const float4 s4 = mine ? LoadParam(p.scale + j * N + 4 * q) : make_float4(0.f, 0.f, 0.f, 0.f);
    sc[4 * q] = s4.x; sc[4 * q + 1] = s4.y; sc[4 * q + 2] = s4.z; sc[4 * q + 3] = s4.w;
    float4 b4 = make_float4(0.f, 0.f, 0.f, 0.f);
    if (kLayer && mine) b4 = LoadParam(p.bias + j * N + 4 * q);
    bi[4 * q] = b4.x; bi[4 * q + 1] = b4.y; bi[4 * q + 2] = b4.z; bi[4 * q + 3] = b4.w;
  }
  const float inv_dim = 1.0f / float(dim);
  const int64_t steps = (rows + kRows - 1) / kRows;
  for (int64_t step = blockIdx.x; step < steps; step += gridDim.x) {
    const int64_t first = step * kRows;
    uint4 raw[kRows];
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const int64_t r = first + k;
      raw[k] = (mine && r < rows) ? LoadStream(x + r * dim + j * N) : make_uint4(0, 0, 0, 0);
    }
    if constexpr (kResidual) {
#pragma unroll
      for (int k = 0; k < kRows; ++k) {
        const int64_t r = first + k;
        if (!mine || r >= rows) continue;
        float a[N], b[N];
        V::Unpack(raw[k], a);
        V::Unpack(LoadStream(static_cast<const T*>(p.residual) + r * dim + j * N), b);
#pragma unroll
        for (int e = 0; e < N; ++e) a[e] += b[e];
        raw[k] = V::Pack(a);  // normalize the sum as rounded to T, as returned
        StoreStream(static_cast<T*>(p.z) + r * dim + j * N, raw[k]);
      }
    }
    float mean[kRows], acc[kRows];
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      mean[k] = 0.0f;
      if constexpr (kLayer) {
        float v[N];
        V::Unpack(raw[k], v);
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < N; ++e) s += v[e];
        mean[k] = s;
      }
    }
    if constexpr (kLayer) {
      BlockSumRows<kRows>(mean, scratch);
#pragma unroll
      for (int k = 0; k < kRows; ++k) mean[k] *= inv_dim;
    }
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      float v[N];
      V::Unpack(raw[k], v);
      float s = 0.0f;
      if (mine) {
#pragma unroll
        for (int e = 0; e < N; ++e) s += (v[e] - mean[k]) * (v[e] - mean[k]);
      }
      acc[k] = s;
    }
    BlockSumRows<kRows>(acc, scratch);
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const int64_t r = first + k;
      if (r >= rows) continue;
      const float rstd = rsqrtf(acc[k] * inv_dim + p.epsilon);
      if (threadIdx.x == 0) {
        if constexpr (kLayer) p.mean[r] = mean[k];
        p.rstd[r] = rstd;
      }
      if (!mine) continue;
      float v[N], out[N];
      V::Unpack(raw[k], v);
#pragma unroll
      for (int e = 0; e < N; ++e) out[e] = (v[e] - mean[k]) * rstd * sc[e] + bi[e];
      StoreStream(static_cast<T*>(p.y) + r * dim + j * N, V::Pack(out));
    }
  }
}

}  // namespace jaxdnn::norms
