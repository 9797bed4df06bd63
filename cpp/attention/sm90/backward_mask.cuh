// Masking and the softcap gradient of the Hopper attention backward's extended
// path (kExt = true of the dK/dV and dQ kernels): padding lengths, causal with
// the bottom-right alignment when q_len < kv_len, a sliding window, softcap
// and segment ids, by the rules of attention/mask.h (AllowedKeys,
// SameSegment, Logit, LogitGrad).
//
// The dQ kernel's tiles are laid out like the forward's (rows = queries,
// columns = keys), so it uses attention/sm90/forward_mask.cuh as it is. The dK/dV
// kernel holds S^T (rows = keys, columns = queries); here are the same rules
// seen from a key: the queries that may attend to it form one range
// [q_lo, q_hi) too, so FwdMaskBlock applies unchanged with the roles swapped
// (lo/hi: the row key's query range, seg: the block's query ids, qid: the row
// key's segment id).
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>

#include "attention/sm90/forward_mask.cuh"

namespace jaxdnn::attention::sm90 {

// The queries q_lo <= q < q_hi that may attend to key `key` (the inverse of
// FwdRowKeys: with diag = q + offset, causal needs key <= diag, the left window
// key >= diag - window_left, the right window key <= diag + window_right).
__device__ __forceinline__ void BwdKeyQueries(const FwdMaskParams& m, const FwdRowGeom& g, int causal,
                                              int key, int& q_lo, int& q_hi) {
  if (key >= g.kv_valid) {
    q_lo = q_hi = 0;
    return;
  }
  const int64_t base = static_cast<int64_t>(key) - g.offset;  // the query whose diagonal is this key
  int64_t lo = 0, hi = g.q_valid;
  if (causal && base > lo) lo = base;
  if (m.window_right >= 0 && base - m.window_right > lo) lo = base - m.window_right;
  if (m.window_left >= 0 && base + m.window_left + 1 < hi) hi = base + m.window_left + 1;
  if (hi < lo) hi = lo;
  q_lo = static_cast<int>(lo);
  q_hi = static_cast<int>(hi);
}

// The query blocks [m_lo, m_hi) of kBlockM queries that key block
// [n0, n0 + kBlockN) needs (q_lo and q_hi are non-decreasing in the key, so the
// band runs from the first key's q_lo to the last valid key's q_hi). Empty:
// m_lo == m_hi.
template <int kBlockN, int kBlockM>
__device__ __forceinline__ void BwdKeyBlockQueryBlocks(const FwdMaskParams& m, const FwdRowGeom& g,
                                                       int causal, int n0, int& m_lo, int& m_hi) {
  const int last = min(n0 + kBlockN, g.kv_valid) - 1;
  m_lo = m_hi = 0;
  if (last < n0) return;
  int lo0, hi0, lo1, hi1;
  BwdKeyQueries(m, g, causal, n0, lo0, hi0);
  BwdKeyQueries(m, g, causal, last, lo1, hi1);
  // A key whose window lies past the queries gets hi = lo > q_valid (no query).
  hi1 = min(hi1, g.q_valid);
  if (hi1 <= lo0) return;
  m_lo = lo0 / kBlockM;
  m_hi = (hi1 + kBlockM - 1) / kBlockM;
}

// The columns [full_lo, full_hi) that every one of the kRows rows
// [r0, r0 + kRows) may see (no range mask needed there); empty when some row
// is past its valid length. `range(row, lo, hi)` is FwdRowKeys or
// BwdKeyQueries (both non-decreasing in the row).
template <int kRows, typename RangeFn>
__device__ __forceinline__ void BwdFullColumns(int r0, int valid_rows, RangeFn range, int& full_lo,
                                               int& full_hi) {
  full_lo = INT_MAX;
  full_hi = 0;
  if (r0 + kRows - 1 >= valid_rows) return;
  int unused0, unused1;
  range(r0 + kRows - 1, full_lo, unused0);
  range(r0, unused1, full_hi);
}

// kCount segment ids from ids[i0, i0 + kCount), kCount / 32 per lane (past
// `len`: INT_MIN; the range mask removes those columns anyway), then into the
// stage's shared-memory slot.
template <int kCount>
__device__ __forceinline__ void BwdLoadSegments(const int32_t* ids, int i0, int len, int lane,
                                                int (&v)[kCount / 32]) {
#pragma unroll
  for (int k = 0; k < kCount / 32; ++k) {
    const int i = i0 + lane + 32 * k;
    v[k] = i < len ? __ldg(ids + i) : INT_MIN;
  }
}

template <int kCount>
__device__ __forceinline__ void BwdStoreSegments(const int (&v)[kCount / 32], int lane, int32_t* ids_smem) {
#pragma unroll
  for (int k = 0; k < kCount / 32; ++k) ids_smem[lane + 32 * k] = v[k];
}

// The lse the backward subtracts, log2-scaled: a row with no allowed key has
// lse = -inf (its P must be 0, not exp(+inf)), so it becomes +inf.
__device__ __forceinline__ float BwdLse2(float lse) {
  constexpr float kLog2e = 1.4426950408889634f;
  return lse == -INFINITY ? INFINITY : lse * kLog2e;
}

// Softcap's factor of the gradient, d s / d (raw * scale) = 1 - (s / c)^2
// (LogitGrad of attention/mask.h without the scale, which the epilogues
// apply). The capped logit s is not kept (registers); it is read back from
// P = exp2(s * log2e - lse2): s * log2e = log2(P) + lse2, so
// s / c = (log2(P) + lse2) * inv_cap_log2e with inv_cap_log2e = 1 / (c log2e).
// Where P is 0 (masked, or underflow) dS is 0 whatever the factor; the clamp
// at 0 keeps log2(0) = -inf and +inf lse (NaN) out of it.
__device__ __forceinline__ float BwdSoftcapFactor(float p, float lse2, float inv_cap_log2e) {
  const float t = (__log2f(p) + lse2) * inv_cap_log2e;
  return fmaxf(1.f - t * t, 0.f);
}

// dS^T *= the softcap factor, in the transposed layout of
// attention/sm90/backward_scores.cuh (columns = queries; `lse_s`: the block's
// log2-scaled lse per query).
template <int kBlockM>
__device__ __forceinline__ void BwdSoftcapDsTransposed(float (&ds)[kBlockM / 2],
                                                       const float (&p)[kBlockM / 2], const float* lse_s,
                                                       int t, float inv_cap_log2e) {
#pragma unroll
  for (int j = 0; j < kBlockM / 8; ++j) {
    const float2 l2 = *reinterpret_cast<const float2*>(lse_s + 8 * j + 2 * t);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      ds[4 * j + 2 * r + 0] *= BwdSoftcapFactor(p[4 * j + 2 * r + 0], l2.x, inv_cap_log2e);
      ds[4 * j + 2 * r + 1] *= BwdSoftcapFactor(p[4 * j + 2 * r + 1], l2.y, inv_cap_log2e);
    }
  }
}

}  // namespace jaxdnn::attention::sm90
