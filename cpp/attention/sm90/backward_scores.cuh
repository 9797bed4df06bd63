// The per-step score math of the sm90 backward kernels that hold transposed
// tiles (rows = 64 keys of a consumer warpgroup, columns = kBlockM queries,
// in the wgmma accumulator layout: thread t of a quad owns columns 8j + 2t,
// +1 of rows g and g + 8). Used by the dK/dV and fused kernels.
#pragma once

#include "attention/sm90/backward_common.cuh"

namespace jaxdnn::attention::sm90 {

// P^T = exp2(S^T * scale_log2 - lse_log2[query]), in place; `lse_s` holds the
// block's kBlockM log2-scaled log-sum-exps (kSubFirst: natural ones, see
// BwdExponent).
template <int kBlockM, bool kF16, bool kSubFirst = false>
__device__ __forceinline__ void ProbsTransposed(float (&s)[kBlockM / 2], const float* lse_s, int t,
                                                float scale_log2) {
#pragma unroll
  for (int j = 0; j < kBlockM / 8; ++j) {
    const float2 l2 = *reinterpret_cast<const float2*>(lse_s + 8 * j + 2 * t);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      s[4 * j + 2 * r + 0] =
          ProbFromLogit<kF16>(BwdExponent<kSubFirst>(s[4 * j + 2 * r + 0], scale_log2, l2.x));
      s[4 * j + 2 * r + 1] =
          ProbFromLogit<kF16>(BwdExponent<kSubFirst>(s[4 * j + 2 * r + 1], scale_log2, l2.y));
    }
  }
}

// Causal: zeroes P^T where the query (q0 + column) precedes the key
// (key0 = this thread's row g key; row g + 8 is key0 + 8).
template <int kBlockM>
__device__ __forceinline__ void MaskEarlierQueries(float (&s)[kBlockM / 2], int q0, int t, int key0) {
#pragma unroll
  for (int j = 0; j < kBlockM / 8; ++j) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int qi = q0 + 8 * j + 2 * t + e;
        if (qi < key0 + 8 * r) s[4 * j + 2 * r + e] = 0.f;
      }
    }
  }
}

// dS^T = P^T (dP^T - delta[query]), in place of dP^T; `delta_s` holds the
// block's kBlockM deltas.
template <int kBlockM>
__device__ __forceinline__ void DsTransposed(float (&dp)[kBlockM / 2], const float (&s)[kBlockM / 2],
                                             const float* delta_s, int t) {
#pragma unroll
  for (int j = 0; j < kBlockM / 8; ++j) {
    const float2 d2 = *reinterpret_cast<const float2*>(delta_s + 8 * j + 2 * t);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      dp[4 * j + 2 * r + 0] = s[4 * j + 2 * r + 0] * (dp[4 * j + 2 * r + 0] - d2.x);
      dp[4 * j + 2 * r + 1] = s[4 * j + 2 * r + 1] * (dp[4 * j + 2 * r + 1] - d2.y);
    }
  }
}

}  // namespace jaxdnn::attention::sm90
