// Warp-per-row forward for 16-bit rows of up to 1024 16-byte vectors (8192
// values) with one parameter row. The v7 kernel re-reads a thread's float32
// scale (and bias) slice from L1/L2 for every row, 4x the row's own bytes for
// LayerNorm (ncu: L2 85% busy, L1 hit 80%, DRAM only 73%), and meets its 128
// threads at a block barrier per row. Here a block stages the parameters in
// shared memory once, then each warp walks rows of a persistent grid on its
// own: one warp per row (up to 16 vectors per lane in registers), or a pair
// of warps per row that meet only at a 64-thread named barrier. Where the
// registers allow, a warp loads its next row before it reduces and stores the
// current one, so its loads stay in flight through the arithmetic.
#pragma once

#include "common/cuda_vec.cuh"
#include "norms/norm_problem.h"

namespace jaxdnn::norms {

// Shared-memory parameter layout: quarter q (4 floats) of vector j lives at
// float4 index q * nvec + j, so the lanes of a warp read one quarter of
// consecutive vectors from consecutive 16 bytes (in row order they would sit
// 32 bytes apart: 2-way bank conflicts). Scale first, then bias (LayerNorm).
inline size_t WarpRowsSmemBytes(int64_t dim, bool layer) {
  return size_t(dim) * sizeof(float) * (layer ? 2 : 1);
}

// Named barrier for the two warps of one row (0 is __syncthreads). A pair
// layout has two rows per block; immediate ids keep ptxas from reserving all
// 16 barriers, as a register id would.
__device__ inline void RowPairBarrier(int slot) {
  if (slot == 0) {
    asm volatile("bar.sync 1, 64;" ::: "memory");
  } else {
    asm volatile("bar.sync 2, 64;" ::: "memory");
  }
}

// One row as packed 16-byte vectors: lane slot k holds vector
// t + k * kStride, t being the thread's place in its row.
template <int kVpl, bool kResidual>
struct WarpRowRegs {
  uint4 x[kVpl];
  uint4 r[kResidual ? kVpl : 1];
};

template <typename T, int kVpl, int kStride, bool kResidual>
__device__ inline void LoadWarpRow(WarpRowRegs<kVpl, kResidual>& a, const NormFwdArgs& p,
                                   int64_t row, bool live, int t, int nvec) {
  constexpr int N = Vec16<T>::kElems;
  const int64_t base = row * p.shape.dim;
#pragma unroll
  for (int k = 0; k < kVpl; ++k) {
    const int j = t + k * kStride;
    const bool in = live && j < nvec;
    a.x[k] = in ? LoadStream(static_cast<const T*>(p.x) + base + int64_t(j) * N)
                : make_uint4(0, 0, 0, 0);
    if constexpr (kResidual) {
      a.r[k] = in ? LoadStream(static_cast<const T*>(p.residual) + base + int64_t(j) * N)
                  : make_uint4(0, 0, 0, 0);
    }
  }
}

// bfloat16 -> float32 is a shift (low half) or a mask (high half): one
// instruction per value, where the library conversion spends two on the high
// half. The values are exact either way; float16 keeps Vec16's conversion.
template <typename T>
__device__ inline void UnpackVec(const uint4& r, float* f) {
  Vec16<T>::Unpack(r, f);
}
template <>
__device__ inline void UnpackVec<__nv_bfloat16>(const uint4& r, float* f) {
  const unsigned w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// How a row layout is launched. kVpl: vectors per lane; kWarpsPerRow: 1, or
// 2 for rows of 513-1024 vectors. A lane holds 4 registers per vector, twice
// that with the next row loaded ahead or with the residual. Where that
// reaches 128 registers (rows from 2056 wide, 1032 with a residual) the kernel
// is held to 168 registers for 12 warps per SM in blocks of 4 (8 warps per
// block would leave a third of the register file idle); lighter layouts
// take blocks of 8 warps (half the parameter staging per SM).
template <bool kResidual, int kVpl, int kWarpsPerRow>
struct WarpRowsLayout {
  static_assert(kWarpsPerRow == 1 || kWarpsPerRow == 2, "a row spans one warp or a pair");
  // The next row's registers double the row's; with a residual they double
  // again, so there only rows of up to 8 vectors per lane are loaded ahead.
  static constexpr bool kPrefetch = (kResidual ? 2 : 1) * kVpl <= 16;
  static constexpr int kRowRegs = 4 * kVpl * (kResidual ? 2 : 1) * (kPrefetch ? 2 : 1);
  static constexpr bool kHeavy = kRowRegs >= 128;
  static constexpr int kBlockWarps = kHeavy ? 4 : 8;
  static constexpr int kMinBlocksPerSm = kHeavy ? 3 : 1;
  static constexpr int kRowsPerBlock = kBlockWarps / kWarpsPerRow;
};

template <typename T, bool kLayer, bool kResidual, int kVpl, int kWarpsPerRow>
__global__ void __launch_bounds__(WarpRowsLayout<kResidual, kVpl, kWarpsPerRow>::kBlockWarps * 32,
                                  WarpRowsLayout<kResidual, kVpl, kWarpsPerRow>::kMinBlocksPerSm)
NormFwdWarpRowsKernel(NormFwdArgs p) {
  using L = WarpRowsLayout<kResidual, kVpl, kWarpsPerRow>;
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  constexpr int kQuarters = N / 4;
  constexpr int kStride = 32 * kWarpsPerRow;
  constexpr int kRowsPerBlock = L::kRowsPerBlock;
  constexpr bool kPrefetch = L::kPrefetch;
  static_assert(kWarpsPerRow == 1 || kRowsPerBlock == 2, "RowPairBarrier has ids for 2 rows");
  // A pair's per-warp statistics {count, mean, M2}, double-buffered by row
  // parity so one barrier per row suffices: a warp rewrites a buffer only
  // after the next row's barrier, which its partner passes after reading it.
  __shared__ float pair_stats[kWarpsPerRow > 1 ? 2 * kRowsPerBlock * kWarpsPerRow * 3 : 1];
  extern __shared__ float4 params_smem[];

  const int nvec = int(p.shape.dim / N);
  const int64_t rows = p.shape.rows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slot = warp / kWarpsPerRow, half = warp % kWarpsPerRow;
  const int t = half * 32 + lane;

  float4* scale_s = params_smem;
  float4* bias_s = params_smem + nvec * kQuarters;
  for (int i = threadIdx.x; i < nvec * kQuarters; i += blockDim.x) {
    const int j = i / kQuarters, q = i % kQuarters;
    scale_s[q * nvec + j] = LoadParam(p.scale + 4 * int64_t(i));
    if constexpr (kLayer) bias_s[q * nvec + j] = LoadParam(p.bias + 4 * int64_t(i));
  }
  __syncthreads();  // the only block-wide barrier

  // Elements this warp holds of every row: vectors j with j % kStride in
  // [32 * half, 32 * half + 32) and j < nvec.
  int held = nvec;
  if constexpr (kWarpsPerRow > 1) {
    held = (nvec / kStride) * 32 + min(max(nvec % kStride - 32 * half, 0), 32);
  }
  const float warp_count = float(held) * float(N);
  const float inv_dim = 1.0f / float(p.shape.dim);

  const int64_t step = int64_t(gridDim.x) * kRowsPerBlock;
  int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + slot;
  WarpRowRegs<kVpl, kResidual> cur;
  if constexpr (kPrefetch) LoadWarpRow<T, kVpl, kStride>(cur, p, row, row < rows, t, nvec);
  for (int parity = 0; row < rows; row += step, parity ^= 1) {
    WarpRowRegs<kVpl, kResidual> next;
    if constexpr (kPrefetch) {
      LoadWarpRow<T, kVpl, kStride>(next, p, row + step, row + step < rows, t, nvec);
    } else {
      LoadWarpRow<T, kVpl, kStride>(cur, p, row, true, t, nvec);
    }
    const int64_t base = row * p.shape.dim;

    if constexpr (kResidual) {
#pragma unroll
      for (int k = 0; k < kVpl; ++k) {
        const int j = t + k * kStride;
        if (j >= nvec) continue;
        float a[N], b[N];
        UnpackVec<T>(cur.x[k], a);
        UnpackVec<T>(cur.r[k], b);
#pragma unroll
        for (int e = 0; e < N; ++e) a[e] += b[e];
        // Normalize the sum as rounded to T: the value that is returned.
        cur.x[k] = V::Pack(a);
        StoreStream(static_cast<T*>(p.z) + base + int64_t(j) * N, cur.x[k]);
      }
    }

    // Statistics: the warp's exact two-pass mean and centred M2 (shuffles
    // only), then for a pair the merge of RowMeanM2 in warp order, so both
    // warps agree bit for bit; RMSNorm: the sum of squares. Each pass
    // unpacks the packed row again behind its per-slot test (j < nvec), even
    // where every slot is full: without those branches ptxas kept all
    // 8 * kVpl unpacked floats from one pass to the next and spilled.
    float mean = 0.0f, m2;
    if constexpr (kLayer) {
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < kVpl; ++k) {
        if (t + k * kStride >= nvec) continue;
        float v[N];
        UnpackVec<T>(cur.x[k], v);
#pragma unroll
        for (int e = 0; e < N; ++e) sum += v[e];
      }
      const float warp_mean = WarpSum(sum) / warp_count;
      float q = 0.0f;
#pragma unroll
      for (int k = 0; k < kVpl; ++k) {
        if (t + k * kStride >= nvec) continue;
        float v[N];
        UnpackVec<T>(cur.x[k], v);
#pragma unroll
        for (int e = 0; e < N; ++e) q += (v[e] - warp_mean) * (v[e] - warp_mean);
      }
      q = WarpSum(q);
      mean = warp_mean;
      m2 = q;
      if constexpr (kWarpsPerRow > 1) {
        float* s = pair_stats + (parity * kRowsPerBlock + slot) * kWarpsPerRow * 3;
        if (lane == 0) { s[3 * half] = warp_count; s[3 * half + 1] = warp_mean; s[3 * half + 2] = q; }
        RowPairBarrier(slot);
        float n = 0.0f, weighted = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarpsPerRow; ++w) { n += s[3 * w]; weighted += s[3 * w] * s[3 * w + 1]; }
        mean = weighted / n;
        m2 = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarpsPerRow; ++w) {
          const float d = s[3 * w + 1] - mean;
          m2 += s[3 * w + 2] + s[3 * w] * d * d;
        }
      }
    } else {
      float sq = 0.0f;
#pragma unroll
      for (int k = 0; k < kVpl; ++k) {
        if (t + k * kStride >= nvec) continue;
        float v[N];
        UnpackVec<T>(cur.x[k], v);
#pragma unroll
        for (int e = 0; e < N; ++e) sq += v[e] * v[e];
      }
      m2 = WarpSum(sq);
      if constexpr (kWarpsPerRow > 1) {
        float* s = pair_stats + (parity * kRowsPerBlock + slot) * kWarpsPerRow * 3;
        if (lane == 0) s[half] = m2;
        RowPairBarrier(slot);
        m2 = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarpsPerRow; ++w) m2 += s[w];
      }
    }
    const float rstd = rsqrtf(m2 * inv_dim + p.epsilon);
    if (t == 0) {
      if constexpr (kLayer) p.mean[row] = mean;
      p.rstd[row] = rstd;
    }

#pragma unroll
    for (int k = 0; k < kVpl; ++k) {
      const int j = t + k * kStride;
      if (j >= nvec) continue;
      float v[N], out[N];
      UnpackVec<T>(cur.x[k], v);
#pragma unroll
      for (int q = 0; q < kQuarters; ++q) {
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
      StoreStream(static_cast<T*>(p.y) + base + int64_t(j) * N, V::Pack(out));
    }
    if constexpr (kPrefetch) cur = next;
  }
}

}  // namespace jaxdnn::norms
