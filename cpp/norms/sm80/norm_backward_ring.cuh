// Backward kernel for rows that are 16-byte vectors, streamed like the
// forward: a block owns a contiguous run of rows of one group and each
// thread copies its own vectors of dy and z kStages - 1 row batches ahead
// into a shared-memory ring (cp.async), so loads stay in flight across the
// row reductions and the stores. Rows are spread wide (as few vectors per
// thread as fit in up to 1024 threads), so each thread's float32
// dscale/dbias partials for its columns stay few enough for registers.
// At the end the row slots are combined in slot order and written as one
// partial row, which NormReducePartialsKernel sums in a fixed order:
// deterministic, no atomics.
#pragma once

#include "common/sm80/cp_async.cuh"
#include "common/cuda_vec.cuh"
#include "norms/sm80/norm_backward.cuh"
#include "norms/sm80/norm_params.cuh"
#include "norms/problem.h"

namespace jaxdnn::norms {

// Shared memory of one block: the ring ([stage][slot][dy, z][vpt][tpr]
// 16-byte vectors), then, with several row slots, [2, dim] floats where the
// slots' partials are combined.
inline size_t BwdRingSmemBytes(int stages, int tpr, int rpc, int vpt, int64_t dim) {
  return size_t(stages) * rpc * 2 * vpt * tpr * 16 + (rpc > 1 ? 2 * dim * sizeof(float) : 0);
}

// Register budget by vectors per thread: 1 -> up to 1024 threads at <= 64
// registers; 2 -> 768 at <= 85; 4 -> 512 at <= 128.
template <int kVpt>
constexpr int BwdRingMaxThreads() {
  return kVpt == 1 ? 1024 : kVpt == 2 ? 768 : 512;
}

// kKeep (the default for 1 vector per thread; JAXDNN_NORM_BWD=reload turns it off): each row's
// x-hat and dy * scale stay in registers from the row sums to dx, instead of
// the second pass unpacking dy and z again, reloading scale and recomputing
// both (PTX: ~40 of ~250 instructions per row; ncu had the 4096/8192-wide
// LayerNorm backward issuing on ~73% of cycles). Keeping the scale in
// registers across rows as well spilled at the 64-register budget. The same float operations
// in the same order: dscale and dbias are bitwise unchanged, dx up to where
// the compiler contracts dy * scale - mean(g) into one FMA.
template <typename T, bool kLayer, bool kResidual, int kVpt, int kStages, bool kKeep = false>
__global__ void __launch_bounds__(BwdRingMaxThreads<kVpt>(), 1)
    NormBwdRingKernel(NormBwdArgs p, BwdGrid grid) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  extern __shared__ uint4 smem_u4[];
  // Two buffers of [rows per block <= 8][64] for the row sums (one barrier
  // per row: RowSum2OneBarrier).
  __shared__ float scratch[2][8 * 64];
  const int64_t dim = p.shape.dim, nvec = dim / N, rpg = p.shape.rows_per_group();
  const int64_t group = blockIdx.y, part = blockIdx.x;
  const int64_t first = group * rpg + part * grid.chunk;
  const int64_t last = min(first + grid.chunk, (group + 1) * rpg);
  const int64_t iters = last > first ? (last - first + blockDim.y - 1) / blockDim.y : 0;
  const T* dy_g = static_cast<const T*>(p.dy);
  const T* z_g = static_cast<const T*>(p.z);
  const int64_t scale_row = group * dim;  // this group's parameters' first column

  // This thread's ring vectors for one stage: dy at [k * tpr], z at
  // [(kVpt + k) * tpr].
  const int tpr = blockDim.x;
  const int stage_vecs = blockDim.y * 2 * kVpt * tpr;
  uint4* mine = smem_u4 + threadIdx.y * 2 * kVpt * tpr + threadIdx.x;

  auto issue = [&](int64_t it, int slot_stage) {
    const int64_t row = first + it * blockDim.y + threadIdx.y;
    if (it >= iters || row >= last) return;
    uint4* dst = mine + slot_stage * stage_vecs;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * tpr;
      if (j < nvec) {
        CpAsync16(dst + k * tpr, dy_g + row * dim + j * N, 16);
        CpAsync16(dst + (kVpt + k) * tpr, z_g + row * dim + j * N, 16);
      }
    }
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    issue(s, s);
    CpAsyncCommit();
  }

  float acc_s[kVpt][N], acc_b[kVpt][N];
#pragma unroll
  for (int k = 0; k < kVpt; ++k)
#pragma unroll
    for (int e = 0; e < N; ++e) acc_s[k][e] = acc_b[k][e] = 0.0f;
  // kKeep: per row, x-hat and dy * scale from the sums' pass for the dx pass.
  float xhat_kept[kKeep ? kVpt : 1][kKeep ? N : 1], g_kept[kKeep ? kVpt : 1][kKeep ? N : 1];

  const float inv_dim = 1.0f / float(dim);
  int stage = 0;
  for (int64_t it = 0; it < iters; ++it) {
    // Refill the stage read in the previous iteration.
    issue(it + kStages - 1, stage == 0 ? kStages - 1 : stage - 1);
    CpAsyncCommit();
    const int64_t row = first + it * blockDim.y + threadIdx.y;
    const bool live = row < last;
    const int64_t base = row * dim;
    const float mean = (kLayer && live) ? p.mean[row] : 0.0f;
    const float rstd = live ? p.rstd[row] : 0.0f;
    CpAsyncWait<kStages - 1>();
    uint4 dy_raw[kVpt], z_raw[kVpt];
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * tpr;
      const bool real = live && j < nvec;
      dy_raw[k] = real ? mine[stage * stage_vecs + k * tpr] : make_uint4(0, 0, 0, 0);
      z_raw[k] = real ? mine[stage * stage_vecs + (kVpt + k) * tpr] : make_uint4(0, 0, 0, 0);
    }
    stage = stage + 1 == kStages ? 0 : stage + 1;

    // Calls fn(i, dy, x-hat, scale) for element i of this thread's vector k
    // (column block j) of the current row.
    auto for_each_element = [&](int k, int64_t j, auto&& fn) {
      float dy[N], z[N];
      V::Unpack(dy_raw[k], dy);
      V::Unpack(z_raw[k], z);
#pragma unroll
      for (int q = 0; q < N / 4; ++q) {
        const float4 s4 = LoadParam4<T>(p.scale, scale_row + j * N + 4 * q, p.params16);
        const float sc[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) fn(4 * q + e, dy[4 * q + e], (z[4 * q + e] - mean) * rstd, sc[e]);
      }
    };
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * tpr;
      if (j >= nvec) continue;
      for_each_element(k, j, [&](int i, float dy, float xhat, float sc) {
        const float g = dy * sc;
        sum_g += g;
        sum_gx += g * xhat;
        acc_s[k][i] += dy * xhat;
        if constexpr (kLayer) acc_b[k][i] += dy;
        if constexpr (kKeep) {
          xhat_kept[k][i] = xhat;
          g_kept[k][i] = g;
        }
      });
    }
    // LayerNorm's two row sums share one barrier (two barrier rounds each
    // cost the 1024-thread blocks of 8192-wide rows as much as the math).
    float* sums = scratch[it & 1];
    float mg = 0.0f, mgx;
    if constexpr (kLayer) {
      const float2 t = RowSum2OneBarrier(make_float2(sum_g, sum_gx), sums);
      mg = t.x * inv_dim;
      mgx = t.y * inv_dim;
    } else {
      mgx = RowSumOneBarrier(sum_gx, sums) * inv_dim;
    }
    if (!live) continue;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * tpr;
      if (j >= nvec) continue;
      float dx[N];
      if constexpr (kResidual) {
        V::Unpack(LoadRow(static_cast<const T*>(p.dsum) + base + j * N, p.stream_rows), dx);
      } else {
#pragma unroll
        for (int i = 0; i < N; ++i) dx[i] = 0.0f;
      }
      if constexpr (kKeep) {
#pragma unroll
        for (int i = 0; i < N; ++i) dx[i] += rstd * (g_kept[k][i] - mg - xhat_kept[k][i] * mgx);
      } else {
        for_each_element(k, j, [&](int i, float dy, float xhat, float sc) {
          dx[i] += rstd * (dy * sc - mg - xhat * mgx);
        });
      }
      StoreRow(static_cast<T*>(p.dx) + base + j * N, V::Pack(dx), p.stream_rows);
    }
  }
  CombineSlotsAndWrite<kLayer, kVpt, N>(p, acc_s, acc_b,
                                        reinterpret_cast<float*>(smem_u4 + size_t(kStages) * stage_vecs));
}

}  // namespace jaxdnn::norms
