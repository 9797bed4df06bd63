// Head dims 256 and 192 in the sm90 two-kernel attention backward: the dK/dV
// kernel. (The delta pre-pass, the dQ kernel and the GQA sum are the
// head-dim-generic ones: the dQ kernel runs with 32-key steps, DqConfig<kD, 32>.)
// On by default (self-test passed on an H200; docs/perf/attention.md,
// Standing decisions: d256 on the two-kernel sm90 backward);
// JAXDNN_ATTENTION_SM90_BWD_D256=0 sends head dim 256 to the mma.sync backward
// and pads 192 to 256 there.
//
// Plan. The head-dim-128 kernel gives each of two consumer warpgroups 64 keys
// of its own and keeps that block's dK and dV in registers: at head dim 256
// that is 2 x 128 accumulator registers per thread, more than the 240 a
// consumer can have. wgmma's M is 64 per warpgroup, so fewer keys per
// warpgroup is no way out; the head dim is split instead:
//  - One CTA = one block of 64 keys (kBlockN = 64), a producer warpgroup and
//    two consumer warpgroups. Consumer cw owns dK and dV columns
//    [128 cw, 128 cw + 128): 64 + 64 accumulator registers.
//  - Per 64-query block (kBlockM = 64) the scores are split by query columns:
//    consumer cw computes S^T and dP^T for queries [32 cw, 32 cw + 32) over the
//    full head dim (m64n32k16, 16 k-steps; A = K / V, B = Q / dO, K-major),
//    then P^T and dS^T for those columns (16 + 16 registers), and stores them
//    rounded to 16 bits into shared memory (64 keys x 64 queries, one
//    128-byte-swizzled panel each), so that each consumer reads the whole
//    64 x 64 P^T and dS^T back as a shared-memory A operand:
//        dV[:, own 128] += P^T dO[:, own 128]   (m64n128k16, 4 k-steps)
//        dK[:, own 128] += dS^T Q[:, own 128]   (B MN-major, tnsp-b 1)
//    A named barrier of the 256 consumer threads after each store (P^T, then
//    dS^T) publishes the halves; fence.proxy.async makes the generic-proxy
//    stores visible to wgmma. The dV gemm runs while dS^T is computed.
//  - P^T / dS^T are double-buffered by query-block parity: a consumer writes
//    buffer it % 2 only after passing iteration it - 1's barriers, which the
//    other consumer reached after waiting for its iteration it - 2 gemms (the
//    last readers of that buffer). So one barrier pair per block suffices.
//  - Shared memory: K, V 32 KB each (resident), Q, dO 32 KB each per stage x 2
//    stages, P^T / dS^T 2 x 2 x 8 KB, lse / delta, barriers: 231,464 bytes
//    (232,064 with the extended path's slots) of the 232,448 allowed.
//  - Registers: 128 accumulators + 32 score registers; 24 / 240 (dense),
//    40 / 232 (extended path: the producer's segment votes).
// Head dim 192 (kSplitOperands): the same CTA, scores and P^T / dS^T panels
// over three 64-column panels, but the operands are split instead of the
// columns: consumer 0 keeps all of dV, consumer 1 all of dK (96 accumulator
// registers each, m64n192k16 over whole panels). Splitting 192 columns in
// two would start a B operand half way into a 128-byte-swizzled panel.
// Consumer 1 waits for the dV product no longer (it issues none) and consumer
// 0 for the dK product; the tensor cores see the same work. Shared memory:
// 2 x 24 KB resident, 2 stages x 2 x 24 KB, the panels: 178 KiB.
// Costs against head dim 128: the scores are computed once (no redundant
// S^T / dP^T), but at N = 32, and P^T / dS^T take a round trip through
// shared memory; deterministic as before (fixed order, no atomics).
//
// The producer and the extended path (lengths, bottom-right causal, window,
// softcap, segments) follow AttnBwdDkDvSm90Kernel (attention/sm90/backward_dkdv.cuh)
// with 64-key blocks.
#pragma once

#include "attention/sm90/backward_common.cuh"
#include "attention/sm90/backward_dkdv_smem.cuh"
#include "attention/sm90/backward_key_block.cuh"
#include "attention/sm90/backward_pipeline_init.cuh"
#include "attention/sm90/backward_dkdv_store.cuh"
#include "attention/sm90/backward_scores.cuh"
#include "attention/sm90/backward_mask.cuh"
#include "attention/sm90/blocks.cuh"

namespace jaxdnn::attention::sm90 {

template <int kD_>
struct DkDvWideConfig {
  static_assert(kD_ == 192 || kD_ == 256, "head dim 192 or 256");
  static constexpr int kD = kD_;
  // 192: each consumer owns one operand whole (dV, dK); 256: half of each.
  static constexpr bool kSplitOperands = kD == 192;
  static constexpr int kThreads = 384;
  static constexpr int kBlockN = 64;  // keys per CTA (shared by both consumers)
  static constexpr int kBlockM = 64;  // queries per pipeline step (32 per consumer for the scores)
  static constexpr int kHalfM = kBlockM / 2;
  // Columns of each accumulator: 256, half of dK and of dV; 192, one whole.
  static constexpr int kAccCols = kSplitOperands ? kD : kD / 2;
  static constexpr int kStages = 2;
  static constexpr int kDBlocks = kD / 64;
  static constexpr int kKBytes = kBlockN * kD * 2;
  static constexpr int kQBytes = kBlockM * kD * 2;
  static constexpr int kPanelBytes = 64 * 128;  // one 64-row, 128-byte-row panel
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kKBytes;
  static constexpr int kOffQ = kOffV + kKBytes;
  static constexpr int kOffDO = kOffQ + kStages * kQBytes;
  static constexpr int kOffP = kOffDO + kStages * kQBytes;  // [buffer][P^T, dS^T] panels
  static constexpr int kOffLse = kOffP + 2 * 2 * kPanelBytes;
  static constexpr int kOffDelta = kOffLse + kStages * kBlockM * 4;
  static constexpr int kOffBar = kOffDelta + kStages * kBlockM * 4;
  static constexpr int kNumBars = 1 + 2 * kStages;
  static constexpr int kSmemBytes = kOffBar + kNumBars * 8 + 1024;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  // Extended path: as DkDvConfig (info word and query segment ids per stage).
  static constexpr int kOffInfo = kOffBar + 96;
  static constexpr int kOffSeg = kOffBar + 128;
  static_assert(kNumBars * 8 <= 96 && kStages * 4 <= 32, "ext smem slots");
  static constexpr int kSmemBytesExt = kOffSeg + kStages * kBlockM * 4 + 1024;
  static constexpr int kProducerRegsExt = 40;
  static constexpr int kConsumerRegsExt = 232;
  static_assert(kProducerRegsExt + 2 * kConsumerRegsExt <= 3 * 168, "register split (ext)");
  static_assert(kSmemBytesExt <= 232448 && kSmemBytes <= 232448, "227 KB of shared memory");
  // Named barriers of the two consumer warpgroups (0 is __syncthreads).
  static constexpr int kBarP = 1;
  static constexpr int kBarDs = 2;
};

// Stores this consumer's 64 x kHalfM part of a transposed score tile (rows =
// keys, columns = queries col0 + [0, 32), the wgmma accumulator layout) as
// 16-bit values into a 64 x 64 K-major panel with the 128-byte swizzle (16-byte
// chunk c of row r at chunk c ^ (r % 8)): the A operand of TileGemmSmemA64.
// Per store instruction a warp's 32 lanes hit 8 rows x 4 words of distinct
// chunks: no bank conflicts.
template <bool kF16>
__device__ __forceinline__ void StoreScoreHalf(const float (&v)[16], uint8_t* panel, int col0, int warp,
                                               int g, int t) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + g + 8 * r;
      const int col = col0 + 8 * j + 2 * t;
      const int chunk = (col / 8) ^ (row % 8);
      *reinterpret_cast<uint32_t*>(panel + row * 128 + chunk * 16 + (col % 8) * 2) =
          PackPair<kF16>(v[4 * j + 2 * r], v[4 * j + 2 * r + 1]);
    }
  }
}

template <int kD_, bool kF16, bool kExt = false>
__global__ void __launch_bounds__(384, 1)
    AttnBwdDkDvWideKernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                          const BwdKernelParams<kExt> p) {
  using Cfg = DkDvWideConfig<kD_>;
  constexpr int kD = Cfg::kD;
  constexpr bool kSplit = Cfg::kSplitOperands;
  constexpr int kAccCols = Cfg::kAccCols;
  constexpr int kBlockN = Cfg::kBlockN, kBlockM = Cfg::kBlockM, kStages = Cfg::kStages;
  constexpr int kHalfM = Cfg::kHalfM;
  constexpr int kDBlocks = Cfg::kDBlocks;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  const DkDvSmem<Cfg> sm(smem);
  uint8_t* smem_p = smem + Cfg::kOffP;

  const BwdKeyBlock cta = BwdKeyBlockOfCta<kBlockN, kBlockM>(p);

  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);

  // q_full: every producer lane (lse/delta stores); lane 0 adds the tx.
  InitBwdPipeline<kStages>(sm.kv_full, sm.q_full, 32, sm.q_empty, &tm_q, &tm_k, &tm_v, &tm_do, [] {});

  if (warpgroup == 0) {
    // ------------------------------ producer ------------------------------
    SetMaxNRegDec<kExt ? Cfg::kProducerRegsExt : Cfg::kProducerRegs>();
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x;
    const int n0 = cta.n_block * kBlockN;
    if (lane == 0) {
      MbarArriveExpectTx(sm.kv_full, 2 * Cfg::kKBytes);
      TmaLoadHeadRows<kDBlocks, kBlockN>(sm.k, &tm_k, sm.kv_full, cta.hk, n0, cta.b);
      TmaLoadHeadRows<kDBlocks, kBlockN>(sm.v, &tm_v, sm.kv_full, cta.hk, n0, cta.b);
    }
    const float* lse_row = p.lse + (static_cast<int64_t>(cta.b) * p.heads + cta.h) * p.q_len;
    const float* delta_row = p.delta + (static_cast<int64_t>(cta.b) * p.heads + cta.h) * p.q_len;
    // Loads query block m into ring slot `it` (lse, delta by every lane; Q, dO
    // by TMA), after `before_arrive` filled the slot's extended-path words.
    auto load_block = [&](int it, int m, auto lse_of, auto before_arrive) {
      const int st = it % kStages;
      MbarWait(&sm.q_empty[st], ((it / kStages) & 1) ^ 1);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int qi = m * kBlockM + lane + 32 * e;
        const bool in = qi < p.q_len;
        // Rows past q_len: P = exp2(-inf) = 0 (their Q, dO rows load as zeros).
        sm.lse[st * kBlockM + lane + 32 * e] = in ? lse_of(lse_row[qi]) : INFINITY;
        sm.delta[st * kBlockM + lane + 32 * e] = in ? delta_row[qi] : 0.f;
      }
      before_arrive(st);
      if (lane == 0) {
        MbarArriveExpectTx(&sm.q_full[st], 2 * Cfg::kQBytes);
        sm.LoadQdo(st, &tm_q, &tm_do, cta.h, m * kBlockM, cta.b);
      } else {
        MbarArrive(&sm.q_full[st]);
      }
    };
    if constexpr (kExt) {
      // The key block's band of query blocks, top down, with segment votes 32
      // blocks at a time; an info word per slot and a terminator (see
      // AttnBwdDkDvSm90Kernel).
      int32_t* info_smem = reinterpret_cast<int32_t*>(smem + Cfg::kOffInfo);
      int32_t* seg_smem = reinterpret_cast<int32_t*>(smem + Cfg::kOffSeg);
      const FwdRowGeom geo = FwdGeom(p.mask, cta.b, p.q_len, p.kv_len);
      int m_lo, m_hi;
      BwdKeyBlockQueryBlocks<kBlockN, kBlockM>(p.mask, geo, p.causal, n0, m_lo, m_hi);
      int full_lo, full_hi;
      BwdFullColumns<kBlockN>(
          n0, geo.kv_valid,
          [&](int key, int& lo, int& hi) { BwdKeyQueries(p.mask, geo, p.causal, key, lo, hi); }, full_lo,
          full_hi);
      const bool has_seg = p.mask.q_segments != nullptr;
      int seg_min = 0, seg_max = 0;  // of the block's valid keys
      if (has_seg && m_hi > m_lo) {
        FwdQuerySegmentRange(p.mask.kv_segments + static_cast<int64_t>(cta.b) * p.kv_len, n0,
                             min(n0 + kBlockN, geo.kv_valid) - 1, lane, seg_min, seg_max);
      }
      const int32_t* q_ids = has_seg ? p.mask.q_segments + static_cast<int64_t>(cta.b) * p.q_len : nullptr;
      int it = 0;
      for (int m_top = m_hi - 1; m_top >= m_lo; m_top -= 32) {
        unsigned may_bits = 0xffffffffu, same_bits = 0xffffffffu;  // no segments: all kind 1
        if (has_seg) {
          FwdVoteSegmentChunk<kBlockM>(q_ids, m_top, m_lo, geo.q_valid, seg_min, seg_max, lane, may_bits,
                                       same_bits);
        }
        const int count = min(32, m_top - m_lo + 1);
        for (int k = 0; k < count; ++k) {
          if (((may_bits >> k) & 1u) == 0) continue;  // warp-uniform skip
          const int m = m_top - k;
          const bool in_full = m * kBlockM >= full_lo && (m + 1) * kBlockM <= full_hi;
          const int kind = ((same_bits >> k) & 1u) ? (in_full ? 0 : 1) : 2;
          int ids[kBlockM / 32];
          if (kind == 2) BwdLoadSegments<kBlockM>(q_ids, m * kBlockM, geo.q_valid, lane, ids);
          load_block(
              it, m, [](float l) { return BwdLse2(l); },
              [&](int st) {
                if (kind == 2) BwdStoreSegments<kBlockM>(ids, lane, seg_smem + st * kBlockM);
                if (lane == 0) info_smem[st] = m * 4 + kind;
              });
          ++it;
        }
      }
      // The terminator slot: no data, info -1 (every lane arrives, no bytes).
      const int st = it % kStages;
      MbarWait(&sm.q_empty[st], ((it / kStages) & 1) ^ 1);
      if (lane == 0) info_smem[st] = -1;
      MbarArrive(&sm.q_full[st]);
    } else {
      for (int it = 0; it < cta.m_count; ++it) {
        load_block(it, cta.m_begin + it, [](float l) { return l * 1.4426950408889634f; }, [](int) {});
      }
    }
  } else {
    // ------------------------------ consumers ------------------------------
    SetMaxNRegInc<kExt ? Cfg::kConsumerRegsExt : Cfg::kConsumerRegs>();
    const int cw = warpgroup - 1;
    const int tid = threadIdx.x % 128;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int g = lane / 4;
    const int t = lane % 4;

    const uint32_t k_base = SmemAddr(sm.k);
    const uint32_t v_base = SmemAddr(sm.v);
    // This consumer's 32 query rows of a Q / dO stage (B of the scores), and
    // the columns of its dK / dV gemms' B (256: its two 64-column panels;
    // 192: all three).
    const uint32_t q_rows = SmemAddr(sm.q) + cw * kHalfM * 128;
    const uint32_t do_rows = SmemAddr(sm.dout) + cw * kHalfM * 128;
    const uint32_t own_cols = kSplit ? 0 : cw * 2 * Cfg::kPanelBytes;
    const uint32_t q_cols = SmemAddr(sm.q) + own_cols;
    const uint32_t do_cols = SmemAddr(sm.dout) + own_cols;
    const float scale_log2 = p.scale_log2;
    const int key0 = cta.n_block * kBlockN + warp * 16 + g;  // +8 for r = 1
    const int col0 = cw * kHalfM;                            // this consumer's score columns

    // 256: this consumer's columns of dV and dK. 192: dv holds consumer 0's
    // dV or consumer 1's dK (all columns), dk is unused.
    float dv[kAccCols / 2];
    float dk[kSplit ? 1 : kAccCols / 2];
#pragma unroll
    for (int i = 0; i < kAccCols / 2; ++i) dv[i] = 0.f;
#pragma unroll
    for (int i = 0; i < (kSplit ? 1 : kAccCols / 2); ++i) dk[i] = 0.f;
    float s[kHalfM / 2];
    float dp[kHalfM / 2];

    auto p_panel = [&](int it) { return smem_p + (it % 2) * 2 * Cfg::kPanelBytes; };
    auto ds_panel = [&](int it) { return smem_p + (it % 2) * 2 * Cfg::kPanelBytes + Cfg::kPanelBytes; };
    auto wait_full = [&](int it) { MbarWait(&sm.q_full[it % kStages], (it / kStages) & 1); };
    // S^T, dP^T for this consumer's 32 queries (two commit groups).
    auto gemm_s_dp = [&](int it) {
      const int st = it % kStages;
      WgmmaFence();
      TileGemmKMajor<kHalfM, kD, kF16, kBlockN, kBlockM>(s, k_base, q_rows + st * Cfg::kQBytes);
      WgmmaCommit();
      TileGemmKMajor<kHalfM, kD, kF16, kBlockN, kBlockM>(dp, v_base, do_rows + st * Cfg::kQBytes);
      WgmmaCommit();
    };
    // Publishes this consumer's half of a 16-bit tile to the other consumer
    // and to the async proxy (wgmma).
    auto publish = [&](const float (&v)[kHalfM / 2], uint8_t* panel, int bar) {
      StoreScoreHalf<kF16>(v, panel, col0, warp, g, t);
      FenceProxyAsyncShared();
      NamedBarrierSync(bar, 256);
    };
    // dV += P^T dO, then (after dS^T is published) dK += dS^T Q: own columns
    // (192: own operand). A consumer without the product commits an empty
    // group, so the waits below count the same groups on both.
    auto gemm_dv = [&](int it) {
      WgmmaFence();
      if (!kSplit || cw == 0) {
        TileGemmSmemA64<kAccCols, kF16, Cfg::kPanelBytes>(dv, SmemAddr(p_panel(it)),
                                                          do_cols + (it % kStages) * Cfg::kQBytes);
      }
      WgmmaCommit();
    };
    auto gemm_dk = [&](int it) {
      WgmmaFence();
      if constexpr (kSplit) {
        if (cw == 1) {
          TileGemmSmemA64<kAccCols, kF16, Cfg::kPanelBytes>(dv, SmemAddr(ds_panel(it)),
                                                            q_cols + (it % kStages) * Cfg::kQBytes);
        }
      } else {
        TileGemmSmemA64<kAccCols, kF16, Cfg::kPanelBytes>(dk, SmemAddr(ds_panel(it)),
                                                          q_cols + (it % kStages) * Cfg::kQBytes);
      }
      WgmmaCommit();
    };
    auto release = [&](int it) {
      __syncwarp();
      if (lane == 0) MbarArrive(&sm.q_empty[it % kStages]);
    };

    MbarWait(sm.kv_full, 0);
    if constexpr (kExt) {
      const int32_t* info_smem = reinterpret_cast<const int32_t*>(smem + Cfg::kOffInfo);
      const int32_t* seg_smem = reinterpret_cast<const int32_t*>(smem + Cfg::kOffSeg);
      // Masks this consumer's S^T columns (see AttnBwdDkDvSm90Kernel).
      auto mask_block = [&](auto seg_tag, int q0, const int32_t* q_ids_smem) {
        constexpr bool kSeg = decltype(seg_tag)::value;
        const FwdRowGeom geo = FwdGeom(p.mask, cta.b, p.q_len, p.kv_len);
        int q_lo[2], q_hi[2], kid[2] = {0, 0};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int key = key0 + 8 * r;
          BwdKeyQueries(p.mask, geo, p.causal, key, q_lo[r], q_hi[r]);
          if (kSeg && key < geo.kv_valid) {
            kid[r] = __ldg(p.mask.kv_segments + static_cast<int64_t>(cta.b) * p.kv_len + key);
          }
        }
        FwdMaskBlock<kSeg>(s, q0, q_lo, q_hi, t, q_ids_smem, kid);
      };
      const bool softcap = p.mask.softcap > 0.f;
      for (int it = 0;; ++it) {
        wait_full(it);
        const int st = it % kStages;
        const int info = info_smem[st];
        if (info < 0) break;  // the terminator (both consumers see it)
        gemm_s_dp(it);
        WgmmaWait<1>();  // S^T
        FenceRegs(s);
        const int q0 = (info >> 2) * kBlockM + col0;
        if (softcap) FwdSoftcap(s, p.mask.softcap, p.mask.softcap_scale);
        if ((info & 3) == 2) {
          mask_block(std::true_type{}, q0, seg_smem + st * kBlockM + col0);
        } else if ((info & 3) == 1) {
          mask_block(std::false_type{}, q0, seg_smem);
        }
        const float* lse_s = sm.lse + st * kBlockM + col0;
        ProbsTransposed<kHalfM, kF16>(s, lse_s, t, scale_log2);
        publish(s, p_panel(it), Cfg::kBarP);
        gemm_dv(it);
        WgmmaWait<1>();  // dP^T (dV may still run)
        FenceRegs(dp);
        DsTransposed<kHalfM>(dp, s, sm.delta + st * kBlockM + col0, t);
        if (softcap) BwdSoftcapDsTransposed<kHalfM>(dp, s, lse_s, t, p.inv_cap_log2e);
        publish(dp, ds_panel(it), Cfg::kBarDs);
        gemm_dk(it);
        WgmmaWait<0>();
        FenceRegs(dv);
        FenceRegs(dk);
        release(it);
      }
    } else {
      for (int it = 0; it < cta.m_count; ++it) {
        const int m = cta.m_begin + it;
        const int st = it % kStages;
        wait_full(it);
        gemm_s_dp(it);
        WgmmaWait<1>();  // S^T
        FenceRegs(s);
        ProbsTransposed<kHalfM, kF16>(s, sm.lse + st * kBlockM + col0, t, scale_log2);
        if (p.causal && m * kBlockM < (cta.n_block + 1) * kBlockN) {
          MaskEarlierQueries<kHalfM>(s, m * kBlockM + col0, t, key0);
        }
        publish(s, p_panel(it), Cfg::kBarP);
        gemm_dv(it);
        WgmmaWait<1>();  // dP^T (dV may still run)
        FenceRegs(dp);
        DsTransposed<kHalfM>(dp, s, sm.delta + st * kBlockM + col0, t);
        publish(dp, ds_panel(it), Cfg::kBarDs);
        gemm_dk(it);
        WgmmaWait<0>();
        FenceRegs(dv);
        FenceRegs(dk);
        release(it);
      }
    }

    // ---------------------------- epilogue ----------------------------
    if constexpr (kSplit) {
      // Consumer 0's dV, consumer 1's dK: all columns of the block's 64 keys.
      const bool is_dk = cw == 1;
      StoreKeyRows<kD, kD, kF16>(p, dv, is_dk ? p.scale : 1.f, is_dk ? p.dk : p.dv,
                                 is_dk ? p.dk_part : p.dv_part, cta.b, cta.h, cta.hk, key0, t, 0);
    } else {
      // This consumer's columns [128 cw, 128 cw + 128) of the block's 64 keys.
      StoreDkDvRows<kD, kAccCols, kF16>(p, dk, dv, cta.b, cta.h, cta.hk, key0, t, cw);
    }
  }
}

}  // namespace jaxdnn::attention::sm90
