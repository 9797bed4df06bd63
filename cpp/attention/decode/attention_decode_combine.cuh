// Split-KV decode forward, phase 2: one warp per output row (batch, head,
// query) merges the row's partials (o, max, sum) over its slots in slot order
// (deterministic: no atomics, the same order every run) into `out` (in the
// input dtype) and the natural-log `lse`. A row no slot saw a key for comes
// out as zeros with lse = -inf, as in the other forward kernels.
#pragma once

#include <cuda_runtime.h>

#include "attention/attention_problem.h"
#include "common/cuda_mma.cuh"

namespace jaxdnn::attention {

constexpr int kDecodeCombineThreads = 256;

template <typename T, int kD>
__global__ void __launch_bounds__(kDecodeCombineThreads)
    DecodeCombineKernel(const float* __restrict__ partial_o, const float* __restrict__ partial_ml,
                        int64_t slots, AttnShape s, T* __restrict__ out, float* __restrict__ lse) {
  constexpr int kPer = kD / 32;  // 2, 4 or 8 consecutive columns per lane
  const int64_t row = (int64_t(blockIdx.x) * kDecodeCombineThreads + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= s.batch * s.heads * s.q_len) return;
  const float2* ml = reinterpret_cast<const float2*>(partial_ml) + row * slots;

  float row_max = -INFINITY;  // log2 units, as phase 1 wrote it
  for (int64_t t = 0; t < slots; ++t) row_max = fmaxf(row_max, ml[t].x);

  float acc[kPer] = {};
  float sum = 0.f;
  if (row_max != -INFINITY) {
    const float* po = partial_o + row * slots * kD + lane * kPer;
    for (int64_t t = 0; t < slots; ++t) {
      const float2 part = ml[t];
      const float w = exp2f(part.x - row_max);  // 0 for an empty slot (max -inf)
      sum += part.y * w;
#pragma unroll
      for (int c = 0; c < kPer; c += 2) {
        const float2 x = *reinterpret_cast<const float2*>(po + t * kD + c);
        acc[c] += x.x * w;
        acc[c + 1] += x.y * w;
      }
    }
  }
  // The slot holding the maximum has sum >= 1, so `sum` > 0 whenever a key was seen.
  const bool empty = !(sum > 0.f);
  const float inv = empty ? 0.f : 1.f / sum;

  const int64_t qi = row % s.q_len, h = (row / s.q_len) % s.heads, b = row / (s.q_len * s.heads);
  T* dst = out + ((b * s.q_len + qi) * s.heads + h) * kD + lane * kPer;
#pragma unroll
  for (int c = 0; c < kPer; c += 2) {
    *reinterpret_cast<uint32_t*>(dst + c) = mma::Pack2<T>(acc[c] * inv, acc[c + 1] * inv);
  }
  if (lane == 0) lse[row] = empty ? -INFINITY : (row_max + __log2f(sum)) * 0.69314718055994531f;
}

}  // namespace jaxdnn::attention
