// Split-KV decode forward, phase 2: merges each output row's (batch, head,
// query) partials (o, max, sum) over its slots into `out` (in the input dtype)
// and the natural-log `lse`. A row no slot saw a key for comes out as zeros
// with lse = -inf, as in the other forward kernels.
//
// A row takes DecodeCombineWarpsPerRow(slots) warps: with few rows and many
// slots (batch 1 over a long cache: 16 rows x 128 slots) one warp per row
// walked 128 slots one after another on two SMs, about half of that case's
// GPU time. Warp w of a row merges the contiguous slot range w of the row;
// the warps' partials are then added in warp order, so the result is
// deterministic (no atomics, the same order every run); with one warp per
// row the order is plain slot order.
#pragma once

#include <cuda_runtime.h>

#include "attention/problem.h"
#include "common/sm80/mma.cuh"

namespace jaxdnn::attention {

constexpr int kDecodeCombineThreads = 256;
constexpr int kDecodeCombineWarps = kDecodeCombineThreads / 32;

// 1, 2, 4 or 8 warps per row: about 16 slots per warp.
inline int DecodeCombineWarpsPerRow(int64_t slots) {
  int w = 1;
  while (w < kDecodeCombineWarps && slots > 16 * w) w *= 2;
  return w;
}

template <typename T, int kD>
__global__ void __launch_bounds__(kDecodeCombineThreads)
    DecodeCombineKernel(const float* __restrict__ partial_o, const float* __restrict__ partial_ml,
                        int64_t slots, int warps_per_row, AttnShape s, T* __restrict__ out,
                        float* __restrict__ lse) {
  constexpr int kPer = kD / 32;  // 2, 4 or 8 consecutive columns per lane
  // Per warp: its kD partial columns, then its partial sum.
  __shared__ float staged[kDecodeCombineWarps][kD + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rows_per_block = kDecodeCombineWarps / warps_per_row;
  const int row_in_block = warp / warps_per_row, part = warp % warps_per_row;
  const int64_t row = int64_t(blockIdx.x) * rows_per_block + row_in_block;
  const bool live = row < s.batch * s.heads * s.q_len;
  const float2* ml = reinterpret_cast<const float2*>(partial_ml) + row * slots;

  // The row's maximum (log2 units, as phase 1 wrote it), over all its slots
  // by every warp of the row: lanes take every 32nd slot, then shuffles.
  float row_max = -INFINITY;
  if (live) {
    for (int64_t t = lane; t < slots; t += 32) row_max = fmaxf(row_max, ml[t].x);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, o));

  float acc[kPer] = {};
  float sum = 0.f;
  if (live && row_max != -INFINITY) {
    const int64_t per = (slots + warps_per_row - 1) / warps_per_row;
    const int64_t first = part * per, last = first + per < slots ? first + per : slots;
    const float* po = partial_o + row * slots * kD + lane * kPer;
#pragma unroll 4
    for (int64_t t = first; t < last; ++t) {
      const float2 ml_t = ml[t];
      const float w = exp2f(ml_t.x - row_max);  // 0 for an empty slot (max -inf)
      sum += ml_t.y * w;
#pragma unroll
      for (int c = 0; c < kPer; c += 2) {
        const float2 x = *reinterpret_cast<const float2*>(po + t * kD + c);
        acc[c] += x.x * w;
        acc[c + 1] += x.y * w;
      }
    }
  }
  if (warps_per_row > 1) {
#pragma unroll
    for (int c = 0; c < kPer; ++c) staged[warp][lane * kPer + c] = acc[c];
    if (lane == 0) staged[warp][kD] = sum;
    __syncthreads();
    if (part != 0) return;
    // The row's first warp adds the others' partials in warp order.
    for (int p = 1; p < warps_per_row; ++p) {
#pragma unroll
      for (int c = 0; c < kPer; ++c) acc[c] += staged[warp + p][lane * kPer + c];
      sum += staged[warp + p][kD];
    }
  }
  if (!live) return;
  // The slot holding the maximum has sum >= 1, so `sum` > 0 whenever a key was seen.
  const bool empty = sum == 0.f;  // a NaN sum (NaN or inf logits) gives NaN, as the reference
  const float inv = empty ? 0.f : 1.f / sum;

  const int64_t qi = row % s.q_len, h = (row / s.q_len) % s.heads, b = row / (s.q_len * s.heads);
  T* dst = out + ((b * s.q_len + qi) * s.heads + h) * kD + lane * kPer;
#pragma unroll
  for (int c = 0; c < kPer; c += 2) {
    *reinterpret_cast<uint32_t*>(dst + c) = sm80::Pack2<T>(acc[c] * inv, acc[c + 1] * inv);
  }
  if (lane == 0)
    lse[row] = empty ? -INFINITY
                     : (row_max == INFINITY ? INFINITY : (row_max + __log2f(sum)) * 0.69314718055994531f);
}

}  // namespace jaxdnn::attention
