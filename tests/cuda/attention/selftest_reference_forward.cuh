// The attention forward reference of the standalone GPU self-tests: one warp
// per (b, h, i) query row, fp32 online softmax over the keys attention/mask.h
// allows (AllowedKeys, SameSegment, Logit), head dims up to 256. Rows with no
// allowed key get out = 0 and lse = -inf, as every jaxdnn forward writes them.
#pragma once

#include <cmath>
#include <cstdint>

#include "attention/mask.h"
#include "attention/problem.h"
#include "../common/selftest_util.cuh"

namespace sm90_selftest {

template <typename T>
__global__ void ReferenceFwd(const T* q, const T* k, const T* v, float* out, float* lse,
                             jaxdnn::attention::AttnShape s, jaxdnn::attention::AttnMaskParams m) {
  namespace ja = jaxdnn::attention;
  const int64_t row_id = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t Sq = s.q_len, Skv = s.kv_len, H = s.heads, Hk = s.kv_heads, D = s.head_dim;
  if (row_id >= s.batch * H * Sq) return;
  const int64_t i = row_id % Sq, h = (row_id / Sq) % H, b = row_id / (Sq * H);
  const int64_t hk = h / (H / Hk);
  constexpr int kMaxPer = 8;  // head dim up to 256
  const int per = static_cast<int>(D / 32);
  float qr[kMaxPer], acc[kMaxPer] = {};
  const T* qp = q + ((b * Sq + i) * H + h) * D + lane * per;
#pragma unroll
  for (int d = 0; d < kMaxPer; ++d) qr[d] = d < per ? ToF(qp[d]) : 0.f;
  float mx = -INFINITY, l = 0.f;
  const ja::KeyRange kr = ja::AllowedKeys(m, s, b, i);
  for (int64_t j = kr.lo; j < kr.hi; ++j) {
    if (!ja::SameSegment(m, s, b, i, j)) continue;
    const int64_t kvo = ((b * Skv + j) * Hk + hk) * D + lane * per;
    float dot = 0.f;
#pragma unroll
    for (int d = 0; d < kMaxPer; ++d)
      if (d < per) dot += qr[d] * ToF(k[kvo + d]);
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    const float x = ja::Logit(m, dot);
    const float mn = fmaxf(mx, x);
    const float c = expf(mx - mn);
    const float pj = expf(x - mn);
    l = l * c + pj;
#pragma unroll
    for (int d = 0; d < kMaxPer; ++d)
      if (d < per) acc[d] = acc[d] * c + pj * ToF(v[kvo + d]);
    mx = mn;
  }
  float* op = out + ((b * Sq + i) * H + h) * D + lane * per;
#pragma unroll
  for (int d = 0; d < kMaxPer; ++d)
    if (d < per) op[d] = l > 0.f ? acc[d] / l : 0.f;
  if (lane == 0) lse[(b * H + h) * Sq + i] = l > 0.f ? mx + logf(l) : -INFINITY;
}

}  // namespace sm90_selftest
