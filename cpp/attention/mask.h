// Which (query, key) pairs take part, the logit transform, and the dropout
// bits: one definition for the CPU and CUDA kernels. jaxdnn/attention/
// reference.py spells out the same rules in JAX.
//
// Alignment: a query row i of batch b sits on the diagonal key
//   diag = i                                  when q_len >= kv_len (the arrays)
//   diag = i + max(kv_len_b - q_len_b, 0)     when q_len <  kv_len
// (kv_len_b, q_len_b: the *_lengths operands, else the array sizes), so causal
// and window masks are top-left for self attention, exactly as in
// jax.nn.dot_product_attention, and bottom-right when the query is shorter
// than the key/value (decode, chunked prefill into a padded cache).
#pragma once

#include <cmath>
#include <cstdint>

#include "attention/problem.h"

namespace jaxdnn::attention {

struct KeyRange {
  int64_t lo = 0, hi = 0;  // allowed keys are lo <= j < hi (before segments/mask)
};

JAXDNN_HD int64_t ClampLength(const int32_t* lengths, int64_t b, int64_t size) {
  if (lengths == nullptr) return size;
  const int64_t n = lengths[b];
  return n < 0 ? 0 : (n > size ? size : n);
}

// The keys padding, causality and the window leave to query row i.
JAXDNN_HD KeyRange AllowedKeys(const AttnMaskParams& m, const AttnShape& s, int64_t b, int64_t i) {
  const int64_t q_len = ClampLength(m.q_lengths, b, s.q_len);
  const int64_t kv_len = ClampLength(m.kv_lengths, b, s.kv_len);
  KeyRange r;
  if (i >= q_len) return r;
  const int64_t diag = i + (s.q_len < s.kv_len && kv_len > q_len ? kv_len - q_len : 0);
  r.hi = kv_len;
  if (m.causal && diag + 1 < r.hi) r.hi = diag + 1;
  if (m.window_left >= 0 && diag - m.window_left > r.lo) r.lo = diag - m.window_left;
  if (m.window_right >= 0 && diag + m.window_right + 1 < r.hi) r.hi = diag + m.window_right + 1;
  if (r.hi < r.lo) r.hi = r.lo;
  return r;
}

JAXDNN_HD bool SameSegment(const AttnMaskParams& m, const AttnShape& s, int64_t b, int64_t i, int64_t j) {
  if (m.q_segments == nullptr) return true;
  return m.q_segments[b * s.q_len + i] == m.kv_segments[b * s.kv_len + j];
}

// Scaled (and soft-capped) logit from the raw q.k product.
JAXDNN_HD float Logit(const AttnMaskParams& m, float dot) {
  float x = dot * m.scale;
  if (m.softcap > 0.f) x = m.softcap * tanhf(x / m.softcap);
  return x;
}

// d Logit / d dot, given the logit Logit() returned (before any bias).
JAXDNN_HD float LogitGrad(const AttnMaskParams& m, float logit) {
  if (m.softcap <= 0.f) return m.scale;
  const float t = logit / m.softcap;  // = tanh(dot * scale / softcap)
  return m.scale * (1.f - t * t);
}

// ---- dropout: a counter-based hash of (seed of the batch row, head, i, j) ----
JAXDNN_HD uint32_t Mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Per (batch row, head, query) state; DropoutKeep then needs one Mix32 per key.
JAXDNN_HD uint32_t DropoutRowState(const uint32_t* seed2, uint32_t head, uint32_t i) {
  const uint32_t h = Mix32(seed2[0] ^ Mix32(head * 0x9E3779B9U + seed2[1]));
  return Mix32(h ^ (i * 0x85EBCA6BU));
}

JAXDNN_HD bool DropoutKeep(uint32_t row_state, uint32_t j, uint32_t threshold) {
  return Mix32(row_state + j * 0xC2B2AE35U) >= threshold;
}

// Bits below the threshold are dropped: P(drop) = rate.
JAXDNN_HD uint32_t DropoutThreshold(float rate) {
  const double t = double(rate) * 4294967296.0;
  return t >= 4294967295.0 ? 4294967295U : uint32_t(t);
}

// Dropout as a kernel uses it: off when no seeds or a zero rate.
struct DropoutPlan {
  bool on;
  uint32_t threshold;
  float keep_scale;  // 1 / (1 - rate): kept probabilities are scaled up
  JAXDNN_HD explicit DropoutPlan(const AttnMaskParams& m)
      : on(m.seeds != nullptr && m.dropout_rate > 0.f),
        threshold(DropoutThreshold(m.dropout_rate)),
        keep_scale(on ? 1.f / (1.f - m.dropout_rate) : 1.f) {}
};

}  // namespace jaxdnn::attention
