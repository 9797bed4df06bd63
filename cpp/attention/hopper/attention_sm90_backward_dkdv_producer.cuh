// The producer warp of the d64/d128 dK/dV kernels (two-kernel and fused): K and
// V once, then each query block's Q, dO (TMA), lse * log2(e) and delta into
// the ring of DkDvSmem.
#pragma once

#include "attention/hopper/attention_sm90_backward_common.cuh"
#include "attention/hopper/attention_sm90_backward_dkdv_smem.cuh"
#include "attention/hopper/attention_sm90_backward_key_block.cuh"
#include "attention/hopper/sm90_backward_mask.cuh"

namespace jaxdnn::attention::sm90 {

// Run by the 32 lanes of the producer warp. Dense (kExt = false): query blocks
// m_begin .. num_m - 1 in order. Extended path: the key block's band of query
// blocks from the top down, segment ids voted on 32 blocks at a time (skip /
// one segment / mixed); each loaded block's info word (m * 4 + kind; kind 0:
// no mask, 1: the range mask, 2: range and segments) and, for kind 2, its
// query segment ids go into the stage's slots (Cfg::kOffInfo, kOffSeg) before
// the full-barrier arrive, and a terminator slot (info -1, no data) ends the
// walk, so a key block no query sees just writes zeros.
// The head-dim-256 kernel keeps its own copy of this loop: written in the
// shape of this one (where the lse / delta rows are formed, where the info
// word is stored), either kernel's generated code changed, and both are kept
// as they were verified / reviewed.
template <class Cfg, bool kExt>
__device__ __forceinline__ void ProduceDkDvQueryBlocks(const BwdKernelParams<kExt>& p, const DkDvSmem<Cfg>& sm,
                                                       const BwdKeyBlock& cta, const CUtensorMap* tm_q,
                                                       const CUtensorMap* tm_k, const CUtensorMap* tm_v,
                                                       const CUtensorMap* tm_do, int lane) {
  constexpr int kBlockN = Cfg::kBlockN, kBlockM = Cfg::kBlockM, kStages = Cfg::kStages;
  constexpr int kDBlocks = Cfg::kDBlocks;
  // Q, dO of query block m into ring stage st (lane 0; the other lanes arrive).
  auto load_q_do = [&](int st, int m) {
    MbarArriveExpectTx(&sm.q_full[st], 2 * Cfg::kQBytes);
    TmaLoadHeadRows<kDBlocks, kBlockM>(sm.q + st * Cfg::kQBytes, tm_q, &sm.q_full[st], cta.h, m * kBlockM, cta.b);
    TmaLoadHeadRows<kDBlocks, kBlockM>(sm.dout + st * Cfg::kQBytes, tm_do, &sm.q_full[st], cta.h, m * kBlockM, cta.b);
  };
  if constexpr (kExt) {
    int32_t* info_smem = reinterpret_cast<int32_t*>(sm.base + Cfg::kOffInfo);
    int32_t* seg_smem = reinterpret_cast<int32_t*>(sm.base + Cfg::kOffSeg);
    const int n0 = cta.n_block * kBlockN;
    if (lane == 0) {
      MbarArriveExpectTx(sm.kv_full, 2 * Cfg::kKBytes);
      TmaLoadHeadRows<kDBlocks, kBlockN>(sm.k, tm_k, sm.kv_full, cta.hk, n0, cta.b);
      TmaLoadHeadRows<kDBlocks, kBlockN>(sm.v, tm_v, sm.kv_full, cta.hk, n0, cta.b);
    }
    const FwdRowGeom geo = FwdGeom(p.mask, cta.b, p.q_len, p.kv_len);
    int m_lo, m_hi;
    BwdKeyBlockQueryBlocks<kBlockN, kBlockM>(p.mask, geo, p.causal, n0, m_lo, m_hi);
    // The query columns all the block's keys see (kind 0 there, unless segments differ).
    int full_lo, full_hi;
    BwdFullColumns<kBlockN>(
        n0, geo.kv_valid, [&](int key, int& lo, int& hi) { BwdKeyQueries(p.mask, geo, p.causal, key, lo, hi); },
        full_lo, full_hi);
    const bool has_seg = p.mask.q_segments != nullptr;
    int seg_min = 0, seg_max = 0;  // of the block's valid keys
    if (has_seg && m_hi > m_lo) {
      FwdQuerySegmentRange(p.mask.kv_segments + static_cast<int64_t>(cta.b) * p.kv_len, n0,
                           min(n0 + kBlockN, geo.kv_valid) - 1, lane, seg_min, seg_max);
    }
    const int32_t* q_ids = has_seg ? p.mask.q_segments + static_cast<int64_t>(cta.b) * p.q_len : nullptr;
    const float* lse_row = p.lse + (static_cast<int64_t>(cta.b) * p.heads + cta.h) * p.q_len;
    const float* delta_row = p.delta + (static_cast<int64_t>(cta.b) * p.heads + cta.h) * p.q_len;
    int it = 0;
    for (int m_top = m_hi - 1; m_top >= m_lo; m_top -= 32) {
      unsigned may_bits = 0xffffffffu, same_bits = 0xffffffffu;  // no segments: all kind 1
      if (has_seg) {
        FwdVoteSegmentChunk<kBlockM>(q_ids, m_top, m_lo, geo.q_valid, seg_min, seg_max, lane, may_bits, same_bits);
      }
      const int count = min(32, m_top - m_lo + 1);
      for (int k = 0; k < count; ++k) {
        if (((may_bits >> k) & 1u) == 0) continue;  // warp-uniform skip
        const int m = m_top - k;
        const bool in_full = m * kBlockM >= full_lo && (m + 1) * kBlockM <= full_hi;
        const int kind = ((same_bits >> k) & 1u) ? (in_full ? 0 : 1) : 2;
        int ids[kBlockM / 32];
        if (kind == 2) BwdLoadSegments<kBlockM>(q_ids, m * kBlockM, geo.q_valid, lane, ids);
        const int st = it % kStages;
        const uint32_t ph = (it / kStages) & 1;
        MbarWait(&sm.q_empty[st], ph ^ 1);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int qi = m * kBlockM + lane + 32 * e;
          const bool in = qi < p.q_len;
          sm.lse[st * kBlockM + lane + 32 * e] = in ? BwdLse2(lse_row[qi]) : INFINITY;
          sm.delta[st * kBlockM + lane + 32 * e] = in ? delta_row[qi] : 0.f;
        }
        if (kind == 2) BwdStoreSegments<kBlockM>(ids, lane, seg_smem + st * kBlockM);
        if (lane == 0) {
          info_smem[st] = m * 4 + kind;
          load_q_do(st, m);
        } else {
          MbarArrive(&sm.q_full[st]);
        }
        ++it;
      }
    }
    // The terminator slot: no data, info -1 (every lane arrives, no bytes).
    const int st = it % kStages;
    MbarWait(&sm.q_empty[st], ((it / kStages) & 1) ^ 1);
    if (lane == 0) info_smem[st] = -1;
    MbarArrive(&sm.q_full[st]);
  } else {
    if (lane == 0) {
      MbarArriveExpectTx(sm.kv_full, 2 * Cfg::kKBytes);
      TmaLoadHeadRows<kDBlocks, kBlockN>(sm.k, tm_k, sm.kv_full, cta.hk, cta.n_block * kBlockN, cta.b);
      TmaLoadHeadRows<kDBlocks, kBlockN>(sm.v, tm_v, sm.kv_full, cta.hk, cta.n_block * kBlockN, cta.b);
    }
    const float* lse_row = p.lse + (static_cast<int64_t>(cta.b) * p.heads + cta.h) * p.q_len;
    const float* delta_row = p.delta + (static_cast<int64_t>(cta.b) * p.heads + cta.h) * p.q_len;
    for (int it = 0; it < cta.m_count; ++it) {
      const int m = cta.m_begin + it;
      const int st = it % kStages;
      const uint32_t ph = (it / kStages) & 1;
      MbarWait(&sm.q_empty[st], ph ^ 1);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int qi = m * kBlockM + lane + 32 * e;
        const bool in = qi < p.q_len;
        // Rows past q_len: P = exp2(-inf) = 0 (their Q, dO rows load as zeros).
        sm.lse[st * kBlockM + lane + 32 * e] = in ? lse_row[qi] * 1.4426950408889634f : INFINITY;
        sm.delta[st * kBlockM + lane + 32 * e] = in ? delta_row[qi] : 0.f;
      }
      if (lane == 0) {
        load_q_do(st, m);
      } else {
        MbarArrive(&sm.q_full[st]);
      }
    }
  }
}

}  // namespace jaxdnn::attention::sm90
