// The dK/dV kernels' epilogue (two-kernel d64/d96/d128 and d192/d256, fused): one
// consumer thread's accumulator rows out to global memory.
#pragma once

#include "attention/sm90/backward_common.cuh"

namespace jaxdnn::attention::sm90 {

// Writes this thread's two key rows (key0, key0 + 8) of one operand times
// `mult`, head-dim columns [col0, col0 + kCols) of kD: in the data type into
// `out` when each query head has its own kv head, else as float32
// per-query-head partials into `part` (the GQA sum adds them up). Rows past
// kv_len are skipped.
template <int kD, int kCols, bool kF16>
__device__ __forceinline__ void StoreKeyRows(const BwdParams& p, const float (&acc)[kCols / 2], float mult,
                                             void* out, float* part, int b, int h, int hk, int key0, int t,
                                             int col0) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + 8 * r;
    if (key >= p.kv_len) continue;
    if (p.group == 1) {
      uint16_t* g = static_cast<uint16_t*>(out) +
                    ((static_cast<int64_t>(b) * p.kv_len + key) * p.kv_heads + hk) * kD + col0;
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j) {
        *reinterpret_cast<uint32_t*>(g + 8 * j + 2 * t) =
            PackPair<kF16>(acc[4 * j + 2 * r] * mult, acc[4 * j + 2 * r + 1] * mult);
      }
    } else {
      float* g = part + ((static_cast<int64_t>(b) * p.kv_len + key) * p.heads + h) * kD + col0;
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j) {
        *reinterpret_cast<float2*>(g + 8 * j + 2 * t) =
            make_float2(acc[4 * j + 2 * r] * mult, acc[4 * j + 2 * r + 1] * mult);
      }
    }
  }
}

// dK (times the softmax scale) and dV of this thread's two key rows, columns
// [col_block * kCols, (col_block + 1) * kCols) of kD (d256: each consumer
// owns half).
template <int kD, int kCols, bool kF16>
__device__ __forceinline__ void StoreDkDvRows(const BwdParams& p, const float (&dk)[kCols / 2],
                                              const float (&dv)[kCols / 2], int b, int h, int hk, int key0,
                                              int t, int col_block) {
  StoreKeyRows<kD, kCols, kF16>(p, dk, p.scale, p.dk, p.dk_part, b, h, hk, key0, t, col_block * kCols);
  StoreKeyRows<kD, kCols, kF16>(p, dv, 1.f, p.dv, p.dv_part, b, h, hk, key0, t, col_block * kCols);
}

}  // namespace jaxdnn::attention::sm90
