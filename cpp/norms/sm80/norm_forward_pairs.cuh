// LayerNorm forward over row pairs (16-bit, 512-8192 wide; see UsePairKernel
// in norms/sm80/norm_launch.cu).
// ncu found L1/TEX the LayerNorm forward's busiest unit (78-83%, RMSNorm
// 52-57%): per 8 elements a thread reads 64 bytes of float32 scale and bias
// against 16 of row data. Here each thread holds the same columns of two rows
// and reads each scale and bias vector once for both, so a row costs as many
// L1 wavefronts as an RMSNorm row (docs/perf/norms.md, Current design:
// Row-pair kernel). Same numerics as NormFwdVecKernel's 16-bit path: per
// row, the one-pass shifted statistics about the mean of its first vector.
#pragma once

#include "common/cuda_vec.cuh"
#include "norms/sm80/norm_forward.cuh"
#include "norms/sm80/norm_params.cuh"
#include "norms/problem.h"

namespace jaxdnn::norms {

// Vectors per thread of each row in a pair: two keeps the two rows' data in
// the 16 registers one row of four takes in NormFwdVecKernel.
constexpr int kPairVpt = 2;

// Sums four values over the block (one row pair per block), in a fixed
// order, with one barrier round; `scratch` holds 128 floats.
__device__ inline float4 BlockSum4OneBarrier(float4 v, float* scratch) {
  v = WarpSum4(v);
  const int warps = blockDim.x >> 5;
  if (warps == 1) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    scratch[warp] = v.x;
    scratch[32 + warp] = v.y;
    scratch[64 + warp] = v.z;
    scratch[96 + warp] = v.w;
  }
  __syncthreads();
  return WarpSum4(lane < warps
                      ? make_float4(scratch[lane], scratch[32 + lane], scratch[64 + lane], scratch[96 + lane])
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f));
}

// Where the pair kernel serves a launch: 16-bit LayerNorm without a fused
// residual, one parameter row (a pair must share it), aligned rows of 64 to
// 1024 vectors (blocks of 32-512 threads at two vectors per row).
inline bool PairKernelFits(const NormShape& s, int elems_per_vec, bool aligned) {
  if (!aligned || s.groups != 1 || s.dim % elems_per_vec != 0) return false;
  const int64_t nvec = s.dim / elems_per_vec;
  return nvec >= 64 && nvec <= 2 * 512;
}

// At most 40 registers, so three 512-thread blocks fit per SM: six rows in
// flight at 8192 wide, where NormFwdVecKernel keeps five (4 bytes of spill at
// float16, none at bfloat16).
template <typename T>
__global__ void __launch_bounds__(512, 3) NormFwdPairKernel(NormFwdArgs p) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  __shared__ float scratch[128];
  const int64_t dim = p.shape.dim;
  const int64_t nvec = dim / N;
  const int64_t row_a = 2 * int64_t(blockIdx.x);
  const bool live_b = row_a + 1 < p.shape.rows;
  const int64_t base_a = row_a * dim, base_b = base_a + dim;
  const T* x = static_cast<const T*>(p.x);

  uint4 a[kPairVpt], b[kPairVpt];
#pragma unroll
  for (int k = 0; k < kPairVpt; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
    a[k] = j < nvec ? LoadRow(x + base_a + j * N, p.stream_rows) : make_uint4(0, 0, 0, 0);
    b[k] = (live_b && j < nvec) ? LoadRow(x + base_b + j * N, p.stream_rows) : make_uint4(0, 0, 0, 0);
  }
  const float shift_a = RowShift<T, false>(p, base_a);
  const float shift_b = live_b ? RowShift<T, false>(p, base_b) : 0.0f;
  const float2 sa = ShiftedSums<T, kPairVpt>(a, nvec, shift_a);
  const float2 sb = ShiftedSums<T, kPairVpt>(b, nvec, shift_b);
  const float4 t = BlockSum4OneBarrier(make_float4(sa.x, sa.y, sb.x, sb.y), scratch);
  const float inv_dim = 1.0f / float(dim);
  const float dmean_a = t.x * inv_dim, dmean_b = t.z * inv_dim;
  const float mean_a = shift_a + dmean_a, mean_b = shift_b + dmean_b;
  const float rstd_a = rsqrtf(fmaxf(t.y - t.x * dmean_a, 0.0f) * inv_dim + p.epsilon);
  const float rstd_b = rsqrtf(fmaxf(t.w - t.z * dmean_b, 0.0f) * inv_dim + p.epsilon);
  if (threadIdx.x == 0) {
    p.mean[row_a] = mean_a;
    p.rstd[row_a] = rstd_a;
    if (live_b) {
      p.mean[row_a + 1] = mean_b;
      p.rstd[row_a + 1] = rstd_b;
    }
  }

  T* y = static_cast<T*>(p.y);
#pragma unroll
  for (int k = 0; k < kPairVpt; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
    if (j >= nvec) continue;
    float va[N], vb[N], oa[N], ob[N];
    V::Unpack(a[k], va);
    V::Unpack(b[k], vb);
#pragma unroll
    for (int q = 0; q < N / 4; ++q) {
      const float4 s4 = LoadParam4<T, true>(p.scale, j * N + 4 * q, p.params16);
      const float4 b4 = LoadParam4<T, true>(p.bias, j * N + 4 * q, p.params16);
      const float sc[4] = {s4.x, s4.y, s4.z, s4.w};
      const float bi[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        oa[4 * q + e] = (va[4 * q + e] - mean_a) * rstd_a * sc[e] + bi[e];
        ob[4 * q + e] = (vb[4 * q + e] - mean_b) * rstd_b * sc[e] + bi[e];
      }
    }
    StoreRow(y + base_a + j * N, V::Pack(oa), p.stream_rows);
    if (live_b) StoreRow(y + base_b + j * N, V::Pack(ob), p.stream_rows);
  }
}

}  // namespace jaxdnn::norms
