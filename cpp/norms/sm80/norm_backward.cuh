// Backward pieces shared by the vector kernel (norms/sm80/norm_backward_ring.cuh):
// the block's row range, the combine of its partial sums, the scalar kernel
// for rows that are not 16-byte vectors, and the fixed-order reduction of
// the blocks' partial rows (deterministic, no atomics).
#pragma once

#include "common/cuda_vec.cuh"
#include "norms/problem.h"
#include "norms/sm80/norm_params.cuh"

namespace jaxdnn::norms {

struct BwdGrid {
  int64_t chunk;  // rows per block
};

// The end of a vector backward block: its row slots' partials (each thread
// holds those of its columns) are added in slot order through `combine`
// ([2, dim] floats of shared memory, used only with several slots), then
// slot 0 writes the block's partial row [dscale, dbias] to the workspace.
template <bool kLayer, int kVpt, int N>
__device__ inline void CombineSlotsAndWrite(const NormBwdArgs& p, float (&acc_s)[kVpt][N],
                                            float (&acc_b)[kVpt][N], float* combine) {
  const int64_t dim = p.shape.dim, nvec = dim / N;
  if (blockDim.y > 1) {
    for (int slot = 1; slot < int(blockDim.y); ++slot) {
      __syncthreads();
      if (int(threadIdx.y) == slot) {
#pragma unroll
        for (int k = 0; k < kVpt; ++k) {
          const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
          if (j >= nvec) continue;
#pragma unroll
          for (int i = 0; i < N; ++i) {
            combine[j * N + i] = acc_s[k][i];
            if constexpr (kLayer) combine[dim + j * N + i] = acc_b[k][i];
          }
        }
      }
      __syncthreads();
      if (threadIdx.y == 0) {
#pragma unroll
        for (int k = 0; k < kVpt; ++k) {
          const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
          if (j >= nvec) continue;
#pragma unroll
          for (int i = 0; i < N; ++i) {
            acc_s[k][i] += combine[j * N + i];
            if constexpr (kLayer) acc_b[k][i] += combine[dim + j * N + i];
          }
        }
      }
    }
    if (threadIdx.y != 0) return;
  }
  float* out = p.partials + (int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * 2 * dim;
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
    if (j >= nvec) continue;
#pragma unroll
    for (int q = 0; q < N / 4; ++q) {
      reinterpret_cast<float4*>(out + j * N)[q] =
          make_float4(acc_s[k][4 * q], acc_s[k][4 * q + 1], acc_s[k][4 * q + 2], acc_s[k][4 * q + 3]);
      if constexpr (kLayer) {
        reinterpret_cast<float4*>(out + dim + j * N)[q] =
            make_float4(acc_b[k][4 * q], acc_b[k][4 * q + 1], acc_b[k][4 * q + 2], acc_b[k][4 * q + 3]);
      }
    }
  }
}

// Scalar path: one row slot per block, so each column belongs to one thread,
// which accumulates its partial straight in the workspace.
template <typename T, bool kLayer, bool kResidual>
__global__ void __launch_bounds__(256) NormBwdScalarKernel(NormBwdArgs p, BwdGrid grid) {
  using V = Vec16<T>;
  __shared__ float scratch[32 * 32];
  const int64_t dim = p.shape.dim, rpg = p.shape.rows_per_group();
  const int64_t group = blockIdx.y, part = blockIdx.x;
  const int64_t first = group * rpg + part * grid.chunk;
  const int64_t last = min(first + grid.chunk, (group + 1) * rpg);
  const int64_t scale_row = group * dim;  // this group's parameters' first column
  float* out = p.partials + (group * gridDim.x + part) * 2 * dim;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) out[j] = out[dim + j] = 0.0f;

  const T* dy = static_cast<const T*>(p.dy);
  const T* z = static_cast<const T*>(p.z);
  const float inv_dim = 1.0f / float(dim);
  for (int64_t row = first; row < last; ++row) {
    const int64_t base = row * dim;
    const float mean = kLayer ? p.mean[row] : 0.0f;
    const float rstd = p.rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const float d = V::Load1(dy + base + j);
      const float xhat = (V::Load1(z + base + j) - mean) * rstd;
      const float g = d * LoadParam1<T>(p.scale, scale_row + j, p.params16);
      sum_g += g;
      sum_gx += g * xhat;
      out[j] += d * xhat;
      if constexpr (kLayer) out[dim + j] += d;
    }
    const float mg = kLayer ? RowSum(sum_g, scratch) * inv_dim : 0.0f;
    const float mgx = RowSum(sum_gx, scratch) * inv_dim;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const float xhat = (V::Load1(z + base + j) - mean) * rstd;
      float v = rstd * (V::Load1(dy + base + j) * LoadParam1<T>(p.scale, scale_row + j, p.params16) - mg -
                        xhat * mgx);
      if constexpr (kResidual) v += V::Load1(static_cast<const T*>(p.dsum) + base + j);
      V::Store1(static_cast<T*>(p.dx) + base + j, v);
    }
  }
}

// dscale[g, c] = sum over partials i of workspace[g, i, 0, c] (dbias from
// [g, i, 1, c]). A block takes 32 columns; each of its blockDim.y warps sums
// a fixed, contiguous share of the partials (coalesced rows), then warp 0
// adds the warps' sums in warp order: deterministic (the warp count is a
// function of the shape: ReduceWarpsFor), and every SM has work even for a
// few thousand columns.
constexpr int kReduceWarps = 8, kReduceWarpsNarrow = 32;

// Narrow rows give the reduction few blocks, each walking its share of the
// partials as one chain of dependent loads: 32 warps a block there.
inline int ReduceWarpsFor(int64_t dim, int64_t groups) {
  return (dim + 31) / 32 * groups < 132 ? kReduceWarpsNarrow : kReduceWarps;
}

template <bool kLayer>
__global__ void __launch_bounds__(32 * kReduceWarpsNarrow) NormReducePartialsKernel(NormBwdArgs p) {
  __shared__ float sums[2][kReduceWarpsNarrow][32];
  const int64_t dim = p.shape.dim, n = p.num_partials;
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  const int64_t group = blockIdx.y;
  const int warp = threadIdx.y, warps = blockDim.y;
  const int64_t share = (n + warps - 1) / warps;
  const int64_t lo = min(n, warp * share), hi = min(n, lo + share);
  float s = 0.0f, b = 0.0f;
  if (c < dim) {
    const float* src = p.partials + group * n * 2 * dim + c;
#pragma unroll 4
    for (int64_t i = lo; i < hi; ++i) {
      s += src[i * 2 * dim];
      if constexpr (kLayer) b += src[i * 2 * dim + dim];
    }
  }
  sums[0][warp][threadIdx.x] = s;
  sums[1][warp][threadIdx.x] = b;
  __syncthreads();
  if (warp != 0 || c >= dim) return;
  s = 0.0f;
  b = 0.0f;
  for (int w = 0; w < warps; ++w) {
    s += sums[0][w][threadIdx.x];
    b += sums[1][w][threadIdx.x];
  }
  // The one rounding to the parameters' dtype.
  StoreParamGrad(p.dscale, group * dim + c, s, p.params16, p.dtype);
  if constexpr (kLayer) StoreParamGrad(p.dbias, group * dim + c, b, p.params16, p.dtype);
}

}  // namespace jaxdnn::norms
