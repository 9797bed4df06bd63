// The dK/dV kernels' epilogue (two-kernel d64/d96/d128 and d192/d256, fused): one
// consumer thread's accumulator rows out to global memory.
#pragma once

#include "attention/sm90/backward_common.cuh"

namespace jaxdnn::attention::sm90 {

// Writes this thread's two key rows (key0, key0 + 8) of dK (times the softmax
// scale) and dV, head-dim columns [col_block * kCols, (col_block + 1) * kCols)
// of kD (d256: each consumer owns half): in the data type into dk/dv when each
// query head has its own kv head, else as float32 per-query-head partials
// into dk_part/dv_part (the GQA sum adds them up). Rows past kv_len are
// skipped. (col_block * kCols is formed here, not by the caller, so the
// generated code stays what it was when each kernel had its own copy.)
template <int kD, int kCols, bool kF16>
__device__ __forceinline__ void StoreDkDvRows(const BwdParams& p, const float (&dk)[kCols / 2],
                                              const float (&dv)[kCols / 2], int b, int h, int hk, int key0,
                                              int t, int col_block) {
  const float scale = p.scale;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + 8 * r;
    if (key >= p.kv_len) continue;
    if (p.group == 1) {
      const int64_t base =
          ((static_cast<int64_t>(b) * p.kv_len + key) * p.kv_heads + hk) * kD + col_block * kCols;
      uint16_t* gk = static_cast<uint16_t*>(p.dk) + base;
      uint16_t* gv = static_cast<uint16_t*>(p.dv) + base;
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j) {
        const int col = 8 * j + 2 * t;
        *reinterpret_cast<uint32_t*>(gk + col) =
            PackPair<kF16>(dk[4 * j + 2 * r] * scale, dk[4 * j + 2 * r + 1] * scale);
        *reinterpret_cast<uint32_t*>(gv + col) = PackPair<kF16>(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
      }
    } else {
      const int64_t base =
          ((static_cast<int64_t>(b) * p.kv_len + key) * p.heads + h) * kD + col_block * kCols;
      float* gk = p.dk_part + base;
      float* gv = p.dv_part + base;
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j) {
        const int col = 8 * j + 2 * t;
        *reinterpret_cast<float2*>(gk + col) =
            make_float2(dk[4 * j + 2 * r] * scale, dk[4 * j + 2 * r + 1] * scale);
        *reinterpret_cast<float2*>(gv + col) = make_float2(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
      }
    }
  }
}

// Head dim 192's split operands (attention/sm90/backward_dkdv_wide.cuh): this
// thread's two key rows of one operand, all kD columns: dK (times the softmax
// scale) when is_dk, else dV; in the data type, or as float32 partials with
// GQA, as StoreDkDvRows.
template <int kD, bool kF16>
__device__ __forceinline__ void StoreDkOrDvRows(const BwdParams& p, const float (&acc)[kD / 2], bool is_dk,
                                                int b, int h, int hk, int key0, int t) {
  const float mult = is_dk ? p.scale : 1.f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + 8 * r;
    if (key >= p.kv_len) continue;
    if (p.group == 1) {
      const int64_t base = ((static_cast<int64_t>(b) * p.kv_len + key) * p.kv_heads + hk) * kD;
      uint16_t* g = static_cast<uint16_t*>(is_dk ? p.dk : p.dv) + base;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        *reinterpret_cast<uint32_t*>(g + 8 * j + 2 * t) =
            PackPair<kF16>(acc[4 * j + 2 * r] * mult, acc[4 * j + 2 * r + 1] * mult);
      }
    } else {
      const int64_t base = ((static_cast<int64_t>(b) * p.kv_len + key) * p.heads + h) * kD;
      float* g = (is_dk ? p.dk_part : p.dv_part) + base;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        *reinterpret_cast<float2*>(g + 8 * j + 2 * t) =
            make_float2(acc[4 * j + 2 * r] * mult, acc[4 * j + 2 * r + 1] * mult);
      }
    }
  }
}

}  // namespace jaxdnn::attention::sm90
