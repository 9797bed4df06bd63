// Backward kernels. A block owns a contiguous run of rows of one group and
// keeps its columns' dscale/dbias partial sums in registers across those
// rows; dy and z are read once (kept packed between the two sweeps) and dx is
// written once. Each block then writes one partial row to the workspace and
// NormReducePartialsKernel sums partials in a fixed order: deterministic,
// no atomics.
#pragma once

#include "common/cuda_vec.cuh"
#include "norms/norm_problem.h"

namespace jaxdnn::norms {

struct BwdGrid {
  int64_t chunk;  // rows per block
};

// The float32 scale row is staged in shared memory once per block; with
// more than one row slot per block, the same shared memory then combines the
// slots' partial sums.
inline size_t BwdSmemBytes(int rpc, int64_t dim) {
  return dim * sizeof(float) * (rpc > 1 ? 3 : 1);
}

template <typename T, bool kLayer, bool kResidual, int kVpt>
__global__ void __launch_bounds__(512) NormBwdVecKernel(NormBwdArgs p, BwdGrid grid) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  extern __shared__ float4 smem_f4[];
  __shared__ float scratch[32 * 32];
  const int64_t dim = p.shape.dim, nvec = dim / N, rpg = p.shape.rows_per_group();
  const int64_t group = blockIdx.y, part = blockIdx.x;
  const int64_t first = group * rpg + part * grid.chunk;
  const int64_t last = min(first + grid.chunk, (group + 1) * rpg);
  const int64_t iters = last > first ? (last - first + blockDim.y - 1) / blockDim.y : 0;
  const T* dy_g = static_cast<const T*>(p.dy);
  const T* z_g = static_cast<const T*>(p.z);

  float* scale = reinterpret_cast<float*>(smem_f4);
  float* combine = scale + dim;  // [2, dim], only when blockDim.y > 1
  {
    const float* src = p.scale + group * dim;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, nthreads = blockDim.x * blockDim.y;
    for (int64_t i = tid; i < dim / 4; i += nthreads)
      reinterpret_cast<float4*>(scale)[i] = LoadParam(src + 4 * i);
    __syncthreads();
  }

  float acc_s[kVpt][N], acc_b[kVpt][N];
#pragma unroll
  for (int k = 0; k < kVpt; ++k)
#pragma unroll
    for (int e = 0; e < N; ++e) acc_s[k][e] = acc_b[k][e] = 0.0f;

  const float inv_dim = 1.0f / float(dim);
  for (int64_t it = 0; it < iters; ++it) {
    const int64_t row = first + it * blockDim.y + threadIdx.y;
    const bool live = row < last;
    const int64_t base = row * dim;
    uint4 dy_raw[kVpt], z_raw[kVpt];
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      if (live && j < nvec) {
        dy_raw[k] = LoadStream(dy_g + base + j * N);
        z_raw[k] = LoadStream(z_g + base + j * N);
      } else {
        dy_raw[k] = z_raw[k] = make_uint4(0, 0, 0, 0);
      }
    }
    const float mean = (kLayer && live) ? p.mean[row] : 0.0f;
    const float rstd = live ? p.rstd[row] : 0.0f;

    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      if (j >= nvec) continue;
      float dy[N], z[N];
      V::Unpack(dy_raw[k], dy);
      V::Unpack(z_raw[k], z);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const float xhat = (z[i] - mean) * rstd;
        const float g = dy[i] * scale[j * N + i];
        sum_g += g;
        sum_gx += g * xhat;
        acc_s[k][i] += dy[i] * xhat;
        if constexpr (kLayer) acc_b[k][i] += dy[i];
      }
    }
    const float mg = kLayer ? RowSum(sum_g, scratch) * inv_dim : 0.0f;
    const float mgx = RowSum(sum_gx, scratch) * inv_dim;
    if (!live) continue;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      if (j >= nvec) continue;
      float dy[N], z[N], dx[N];
      V::Unpack(dy_raw[k], dy);
      V::Unpack(z_raw[k], z);
      if constexpr (kResidual) {
        V::Unpack(LoadStream(static_cast<const T*>(p.dsum) + base + j * N), dx);
      } else {
#pragma unroll
        for (int i = 0; i < N; ++i) dx[i] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const float xhat = (z[i] - mean) * rstd;
        dx[i] += rstd * (dy[i] * scale[j * N + i] - mg - xhat * mgx);
      }
      StoreStream(static_cast<T*>(p.dx) + base + j * N, V::Pack(dx));
    }
  }
  // Combine the row slots of this block in slot order, then write the partial.
  if (blockDim.y > 1) {
    for (int slot = 1; slot < int(blockDim.y); ++slot) {
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
      __syncthreads();
    }
    if (threadIdx.y != 0) return;
  }
  float* out = p.partials + (group * gridDim.x + part) * 2 * dim;
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
  const float* scale = p.scale + group * dim;
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
      const float g = d * scale[j];
      sum_g += g;
      sum_gx += g * xhat;
      out[j] += d * xhat;
      if constexpr (kLayer) out[dim + j] += d;
    }
    const float mg = kLayer ? RowSum(sum_g, scratch) * inv_dim : 0.0f;
    const float mgx = RowSum(sum_gx, scratch) * inv_dim;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const float xhat = (V::Load1(z + base + j) - mean) * rstd;
      float v = rstd * (V::Load1(dy + base + j) * scale[j] - mg - xhat * mgx);
      if constexpr (kResidual) v += V::Load1(static_cast<const T*>(p.dsum) + base + j);
      V::Store1(static_cast<T*>(p.dx) + base + j, v);
    }
  }
}

// dscale[g, c] = sum over partials p (in order) of workspace[g, p, 0, c].
template <bool kLayer>
__global__ void NormReducePartialsKernel(NormBwdArgs p) {
  const int64_t dim = p.shape.dim;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t group = blockIdx.y;
  if (c >= dim) return;
  const float* src = p.partials + group * p.num_partials * 2 * dim + c;
  float s = 0.0f, b = 0.0f;
  for (int64_t i = 0; i < p.num_partials; ++i) {
    s += src[i * 2 * dim];
    if constexpr (kLayer) b += src[i * 2 * dim + dim];
  }
  p.dscale[group * dim + c] = s;
  if constexpr (kLayer) p.dbias[group * dim + c] = b;
}

}  // namespace jaxdnn::norms
