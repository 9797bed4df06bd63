// Opt-in backward (JAXDNN_NORM_BWD=smem) for rows of 256-1024 16-byte
// vectors of a 2-byte type. The ring kernel keeps each thread's dscale/dbias
// partials in registers and re-reads its float32 scale slice through L1 twice
// per row; here both live in dynamic shared memory instead: the group's scale
// is staged once per block, and each thread's partial sums sit in shared
// slots that only it touches, so every column still adds its rows in row
// order (deterministic, no atomics). The freed registers hold the next pass's
// dy and z (kRows rows, loaded before this pass's dx is stored), and the kRows
// rows of a pass share one block reduction (one barrier per pass, against
// four per row in the ring). A persistent grid: one block per resident slot,
// each writing one partial row that NormReducePartialsKernel sums.
#pragma once

#include "common/cuda_vec.cuh"
#include "norms/norm_problem.h"

namespace jaxdnn::norms {

// Row widths taken (16-byte vectors per row): one vector per thread, so the
// row fits a block of up to 1024 threads; narrower rows go to the ring.
constexpr int64_t kBwdSmemMinVecs = 256;
constexpr int64_t kBwdSmemMaxVecs = 1024;
// Rows per pass: their loads are in flight together, their reductions share
// one barrier and their partial-sum updates one shared read-modify-write.
constexpr int kBwdSmemRows = 2;

template <typename T>
inline bool BwdSmemCovers(int64_t dim) {
  constexpr int64_t n = Vec16<T>::kElems;
  return sizeof(T) == 2 && dim % n == 0 && dim / n >= kBwdSmemMinVecs && dim / n <= kBwdSmemMaxVecs;
}

// Dynamic shared memory: float32 scale, dscale and (LayerNorm) dbias, one
// row each.
inline size_t BwdSmemBytes(bool layer, int64_t dim) {
  return size_t(layer ? 3 : 2) * size_t(dim) * sizeof(float);
}

// Sums each of kCount values over the block's threads in a fixed order
// (shuffles, then warp order), every thread getting the result. `scratch`
// alternates between two buffers by pass parity, so one barrier suffices: a
// warp can write buffer b again only after the next pass's barrier, which
// every warp reaches after its reads of b.
template <int kCount>
__device__ inline void BlockSumsOneBarrier(float (&v)[kCount], float (*scratch)[32]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int c = 0; c < kCount; ++c) v[c] = WarpSum(v[c]);
  if (warps == 1) return;
  if (lane == 0) {
#pragma unroll
    for (int c = 0; c < kCount; ++c) scratch[c][warp] = v[c];
  }
  __syncthreads();
#pragma unroll
  for (int c = 0; c < kCount; ++c) v[c] = WarpSum(lane < warps ? scratch[c][lane] : 0.0f);
}

// One pass's rows as loaded: raw 16-byte vectors of dy and z per row and
// per vector of this thread, and the rows' saved statistics.
template <int kRows, int kVpt>
struct BwdPassRows {
  uint4 dy[kRows][kVpt];
  uint4 z[kRows][kVpt];
  float mean[kRows];
  float rstd[kRows];
};

template <typename T, bool kLayer, bool kResidual, int kVpt, int kRows>
__global__ void __launch_bounds__(1024, 1) NormBwdSmemKernel(NormBwdArgs p) {
  using V = Vec16<T>;
  constexpr int N = V::kElems, Q = N / 4;  // float4 quads per vector
  extern __shared__ float4 bwd_smem_f4[];
  __shared__ float sums[2][2 * kRows][32];
  const int64_t dim = p.shape.dim, nvec = dim / N, rpg = p.shape.rows_per_group();
  const int64_t group = blockIdx.y, part = blockIdx.x, parts = gridDim.x;
  // An even split of the group's rows (blocks differ by at most one row).
  const int64_t first = group * rpg + part * rpg / parts;
  const int64_t last = group * rpg + (part + 1) * rpg / parts;
  const int tpr = blockDim.x;

  // [Q][nvec] float4 arrays: quad q of vector j at q * nvec + j, so a warp's
  // threads (consecutive j) touch consecutive float4s, free of bank conflicts.
  float4* const scale_s = bwd_smem_f4;
  float4* const dscale_s = scale_s + Q * nvec;
  float4* const dbias_s = dscale_s + Q * nvec;  // LayerNorm only
  const float* scale = p.scale + group * dim;
  for (int64_t c4 = threadIdx.x; c4 < Q * nvec; c4 += tpr) {
    const int64_t slot = (c4 % Q) * nvec + c4 / Q;
    scale_s[slot] = LoadParam(scale + 4 * c4);
    dscale_s[slot] = make_float4(0.f, 0.f, 0.f, 0.f);
    if constexpr (kLayer) dbias_s[slot] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  __syncthreads();

  const T* dy_g = static_cast<const T*>(p.dy);
  const T* z_g = static_cast<const T*>(p.z);
  auto load = [&](int64_t row0, BwdPassRows<kRows, kVpt>& r) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int64_t row = row0 + i;
      const bool live = row < last;
      r.mean[i] = (kLayer && live) ? p.mean[row] : 0.0f;
      r.rstd[i] = live ? p.rstd[row] : 0.0f;
#pragma unroll
      for (int k = 0; k < kVpt; ++k) {
        const int64_t j = threadIdx.x + int64_t(k) * tpr;
        const bool real = live && j < nvec;
        r.dy[i][k] = real ? LoadStream(dy_g + row * dim + j * N) : make_uint4(0, 0, 0, 0);
        r.z[i][k] = real ? LoadStream(z_g + row * dim + j * N) : make_uint4(0, 0, 0, 0);
      }
    }
  };

  const float inv_dim = 1.0f / float(dim);
  const int64_t passes = last > first ? (last - first + kRows - 1) / kRows : 0;
  BwdPassRows<kRows, kVpt> cur;
  load(first, cur);
  for (int64_t pass = 0; pass < passes; ++pass) {
    const int64_t row0 = first + pass * kRows;
    // The next pass's loads fly during this pass's sums, barrier and stores.
    BwdPassRows<kRows, kVpt> next;
    load(row0 + kRows, next);

    // Row sums of g = dy * scale and g * xhat; this thread's partials of
    // dscale += dy * xhat and dbias += dy, the pass's rows in row order.
    // Liveness of a row is the same for the whole block.
    // [sum_gx of each row, then (LayerNorm) sum_g of each row]
    constexpr int kSums = kLayer ? 2 * kRows : kRows;
    float red[kSums];
#pragma unroll
    for (int c = 0; c < kSums; ++c) red[c] = 0.0f;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * tpr;
      if (j >= nvec) continue;
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        const float4 s4 = scale_s[q * nvec + j];
        const float sc[4] = {s4.x, s4.y, s4.z, s4.w};
        float4 ds4 = dscale_s[q * nvec + j];
        float4 db4 = kLayer ? dbias_s[q * nvec + j] : make_float4(0.f, 0.f, 0.f, 0.f);
        float ds[4] = {ds4.x, ds4.y, ds4.z, ds4.w}, db[4] = {db4.x, db4.y, db4.z, db4.w};
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          if (row0 + i >= last) continue;
          float dy[N], z[N];
          V::Unpack(cur.dy[i][k], dy);
          V::Unpack(cur.z[i][k], z);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float d = dy[4 * q + e];
            const float xhat = (z[4 * q + e] - cur.mean[i]) * cur.rstd[i];
            const float g = d * sc[e];
            red[i] += g * xhat;
            if constexpr (kLayer) red[kRows + i] += g;
            ds[e] += d * xhat;
            if constexpr (kLayer) db[e] += d;
          }
        }
        dscale_s[q * nvec + j] = make_float4(ds[0], ds[1], ds[2], ds[3]);
        if constexpr (kLayer) dbias_s[q * nvec + j] = make_float4(db[0], db[1], db[2], db[3]);
      }
    }
    // The residual gradient of the pass is loaded before the barrier, so its
    // latency overlaps the reduction.
    uint4 dsum[kRows][kVpt];
    if constexpr (kResidual) {
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
#pragma unroll
        for (int k = 0; k < kVpt; ++k) {
          const int64_t row = row0 + i, j = threadIdx.x + int64_t(k) * tpr;
          dsum[i][k] = (row < last && j < nvec)
                           ? LoadStream(static_cast<const T*>(p.dsum) + row * dim + j * N)
                           : make_uint4(0, 0, 0, 0);
        }
      }
    }
    BlockSumsOneBarrier<kSums>(red, sums[pass & 1]);

    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (+ dsum).
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int64_t row = row0 + i;
      if (row >= last) continue;
      const float mgx = red[i] * inv_dim;
      float mg = 0.0f;
      if constexpr (kLayer) mg = red[kRows + i] * inv_dim;
#pragma unroll
      for (int k = 0; k < kVpt; ++k) {
        const int64_t j = threadIdx.x + int64_t(k) * tpr;
        if (j >= nvec) continue;
        float dy[N], z[N], dx[N];
        V::Unpack(cur.dy[i][k], dy);
        V::Unpack(cur.z[i][k], z);
        if constexpr (kResidual) {
          V::Unpack(dsum[i][k], dx);
        } else {
#pragma unroll
          for (int e = 0; e < N; ++e) dx[e] = 0.0f;
        }
#pragma unroll
        for (int q = 0; q < Q; ++q) {
          const float4 s4 = scale_s[q * nvec + j];
          const float sc[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int n = 4 * q + e;
            const float xhat = (z[n] - cur.mean[i]) * cur.rstd[i];
            dx[n] += cur.rstd[i] * (dy[n] * sc[e] - mg - xhat * mgx);
          }
        }
        StoreStream(static_cast<T*>(p.dx) + row * dim + j * N, V::Pack(dx));
      }
    }
    cur = next;
  }

  // This block's partial row [dscale, dbias] in column order; each thread
  // reads back only its own slots, so no barrier is needed.
  float* out = p.partials + (group * parts + part) * 2 * dim;
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * tpr;
    if (j >= nvec) continue;
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      reinterpret_cast<float4*>(out + j * N)[q] = dscale_s[q * nvec + j];
      if constexpr (kLayer) reinterpret_cast<float4*>(out + dim + j * N)[q] = dbias_s[q * nvec + j];
    }
  }
}

}  // namespace jaxdnn::norms
