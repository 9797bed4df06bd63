// The sm90 backward's dK/dV kernel (see attention/sm90/backward.cuh).
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

// ---------------------------------------------------------------------------
// 2. dK / dV.
template <int kD>
struct DkDvConfig {
  // Head dim 96: the 128 layout (two panels, TMA zero-fills the second
  // half), the gemms over 96 columns (see attention/sm90/forward_config.cuh).
  static_assert(kD == 64 || kD == 96 || kD == 128, "head dim 64, 96 or 128");
  static constexpr int kThreads = 384;
  static constexpr int kBlockN = 128;  // keys per CTA (2 consumers x 64)
  static constexpr int kBlockM = 64;   // queries per pipeline step
  static constexpr int kStages = kD > 64 ? 3 : 4;
  static constexpr int kDBlocks = (kD + 63) / 64;
  static constexpr int kKBytes = kBlockN * kDBlocks * 128;
  static constexpr int kQBytes = kBlockM * kDBlocks * 128;
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kKBytes;
  static constexpr int kOffQ = kOffV + kKBytes;
  static constexpr int kOffDO = kOffQ + kStages * kQBytes;
  static constexpr int kOffLse = kOffDO + kStages * kQBytes;
  static constexpr int kOffDelta = kOffLse + kStages * kBlockM * 4;
  static constexpr int kOffBar = kOffDelta + kStages * kBlockM * 4;
  static constexpr int kNumBars = 1 + 2 * kStages;
  static constexpr int kSmemBytes = kOffBar + kNumBars * 8 + 1024;
  static constexpr int kProducerRegs =
      24;  // 24 + 2 x 240: the whole register file (setmaxnreg.inc would block otherwise)
  static constexpr int kConsumerRegs = 240;
  // Extended path: per ring stage, the query block's info word (m * 4 +
  // kind, -1 = the terminator; kind 0: no mask, 1: the range mask, 2: range
  // and segments) and its 64 query segment ids.
  static constexpr int kOffInfo = kOffBar + 96;
  static constexpr int kOffSeg = kOffBar + 128;
  static_assert(kNumBars * 8 <= 96 && kStages * 4 <= 32, "ext smem slots");
  static constexpr int kSmemBytesExt = kOffSeg + kStages * kBlockM * 4 + 1024;
  // Bias (kBias): each consumer warp's transposed stage after the ext slots.
  static constexpr int kOffBias = (kOffSeg + kStages * kBlockM * 4 + 127) / 128 * 128;
  static constexpr int kSmemBytesBias = kOffBias + 8 * BwdBiasStageT<kBlockM>::kBytes + 1024;
  static constexpr int kProducerRegsExt = 40;
  static constexpr int kConsumerRegsExt = 232;
  static_assert(kProducerRegsExt + 2 * kConsumerRegsExt <= 3 * 168, "register split (ext)");
};

// kExt: the extended path (lengths, bottom-right causal, window, softcap,
// segments; attention/sm90/backward_mask.cuh). Its producer warp walks the key block's
// band of query blocks from the top down, votes on their segment ids 32
// blocks at a time (skip / one segment / mixed) and hands each loaded block's
// index and kind (and its query segment ids) to the consumers through a
// shared-memory slot per ring stage, written before the stage's full-barrier
// arrive; a terminator slot (-1, no data) ends the walk, so a key block no
// query sees just writes zeros. The dense instantiations (kExt = false) are
// the code they were before; kExt runs without kOverlap.
// kBias (with kExt): the scores with the bias, read transposed
// (attention/sm90/backward_bias.cuh).
template <int kD, bool kF16, bool kOverlap, bool kExt = false, bool kBias = false>
__global__ void __launch_bounds__(384, 1)
    AttnBwdDkDvSm90Kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                          const BwdKernelParams<kExt> p) {
  static_assert(!(kExt && kOverlap), "the extended path runs without overlap");
  static_assert(!kBias || kExt, "bias: the extended path");
  using Cfg = DkDvConfig<kD>;
  static_assert(!kBias || Cfg::kSmemBytesBias <= 227 * 1024, "shared memory per CTA (bias)");
  constexpr int kBlockN = Cfg::kBlockN, kBlockM = Cfg::kBlockM, kStages = Cfg::kStages;
  constexpr int kDBlocks = Cfg::kDBlocks;
  constexpr float kLog2e = 1.4426950408889634f;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  const DkDvSmem<Cfg> sm(smem);

  const BwdKeyBlock cta = BwdKeyBlockOfCta<kBlockN, kBlockM>(p);

  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);

  // q_full: every producer lane (lse/delta stores); lane 0 adds the tx.
  InitBwdPipeline<kStages>(sm.kv_full, sm.q_full, 32, sm.q_empty, &tm_q, &tm_k, &tm_v, &tm_do, [] {});

  if (warpgroup == 0) {
    // ------------------------------ producer ------------------------------
    SetMaxNRegDec<kExt ? Cfg::kProducerRegsExt : Cfg::kProducerRegs>();
    if constexpr (kExt) {
      if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        int32_t* info_smem = reinterpret_cast<int32_t*>(smem + Cfg::kOffInfo);
        int32_t* seg_smem = reinterpret_cast<int32_t*>(smem + Cfg::kOffSeg);
        const int n0 = cta.n_block * kBlockN;
        if (lane == 0) {
          MbarArriveExpectTx(sm.kv_full, 2 * Cfg::kKBytes);
          TmaLoadHeadRows<kDBlocks, kBlockN>(sm.k, &tm_k, sm.kv_full, cta.hk, n0, cta.b);
          TmaLoadHeadRows<kDBlocks, kBlockN>(sm.v, &tm_v, sm.kv_full, cta.hk, n0, cta.b);
        }
        const FwdRowGeom geo = FwdGeom(p.mask, cta.b, p.q_len, p.kv_len);
        int m_lo, m_hi;
        BwdKeyBlockQueryBlocks<kBlockN, kBlockM>(p.mask, geo, p.causal, n0, m_lo, m_hi);
        // The query columns all 128 keys see (kind 0 there, unless segments differ).
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
        const float* lse_row = p.lse + (static_cast<int64_t>(cta.b) * p.heads + cta.h) * p.q_len;
        const float* delta_row = p.delta + (static_cast<int64_t>(cta.b) * p.heads + cta.h) * p.q_len;
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
            const int st = it % kStages;
            const uint32_t ph = (it / kStages) & 1;
            MbarWait(&sm.q_empty[st], ph ^ 1);
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int qi = m * kBlockM + lane + 32 * e;
              const bool in = qi < p.q_len;
              sm.lse[st * kBlockM + lane + 32 * e] = !in     ? INFINITY
                                                     : kBias ? BwdLseNat(lse_row[qi])
                                                             : BwdLse2(lse_row[qi]);
              sm.delta[st * kBlockM + lane + 32 * e] = in ? delta_row[qi] : 0.f;
            }
            if (kind == 2) BwdStoreSegments<kBlockM>(ids, lane, seg_smem + st * kBlockM);
            if (lane == 0) {
              info_smem[st] = m * 4 + kind;
              MbarArriveExpectTx(&sm.q_full[st], 2 * Cfg::kQBytes);
              sm.LoadQdo(st, &tm_q, &tm_do, cta.h, m * kBlockM, cta.b);
            } else {
              MbarArrive(&sm.q_full[st]);
            }
            ++it;
          }
        }
        PublishEndSlot<kStages>(sm.q_empty, sm.q_full, info_smem, it, lane);
      }
    } else if (threadIdx.x < 32) {
      const int lane = threadIdx.x;
      if (lane == 0) {
        MbarArriveExpectTx(sm.kv_full, 2 * Cfg::kKBytes);
        TmaLoadHeadRows<kDBlocks, kBlockN>(sm.k, &tm_k, sm.kv_full, cta.hk, cta.n_block * kBlockN, cta.b);
        TmaLoadHeadRows<kDBlocks, kBlockN>(sm.v, &tm_v, sm.kv_full, cta.hk, cta.n_block * kBlockN, cta.b);
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
          sm.lse[st * kBlockM + lane + 32 * e] = in ? lse_row[qi] * kLog2e : INFINITY;
          sm.delta[st * kBlockM + lane + 32 * e] = in ? delta_row[qi] : 0.f;
        }
        if (lane == 0) {
          MbarArriveExpectTx(&sm.q_full[st], 2 * Cfg::kQBytes);
          sm.LoadQdo(st, &tm_q, &tm_do, cta.h, m * kBlockM, cta.b);
        } else {
          MbarArrive(&sm.q_full[st]);
        }
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

    const uint32_t k_base = SmemAddr(sm.k) + cw * 64 * 128;
    const uint32_t v_base = SmemAddr(sm.v) + cw * 64 * 128;
    const uint32_t q_base = SmemAddr(sm.q);
    const uint32_t do_base = SmemAddr(sm.dout);
    const float scale_log2 = p.scale_log2;
    const int key0 = cta.n_block * kBlockN + cw * 64 + warp * 16 + g;  // +8 for r = 1

    float dv[kD / 2];
    float dk[kD / 2];
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) {
      dv[i] = 0.f;
      dk[i] = 0.f;
    }

    float s[kBlockM / 2];
    float dp[kBlockM / 2];
    uint32_t pa[kBlockM / 16][4];
    uint32_t dsa[kBlockM / 16][4];

    // S^T = K Q^T and dP^T = V dO^T (two commit groups).
    auto gemm_s_dp = [&](int it) {
      const int st = it % kStages;
      const uint32_t qb = q_base + st * Cfg::kQBytes;
      const uint32_t dob = do_base + st * Cfg::kQBytes;
      WgmmaFence();
      TileGemmKMajor<kBlockM, kD, kF16, kBlockN, kBlockM>(s, k_base, qb);
      WgmmaCommit();
      TileGemmKMajor<kBlockM, kD, kF16, kBlockN, kBlockM>(dp, v_base, dob);
      WgmmaCommit();
    };
    // P^T in place of S^T (columns are queries), packed into pa.
    auto compute_p = [&](int it) {
      const int m = cta.m_begin + it;
      const float* lse_s = sm.lse + (it % kStages) * kBlockM;
      ProbsTransposed<kBlockM, kF16>(s, lse_s, t, scale_log2);
      if (p.causal && m * kBlockM < (cta.n_block + 1) * kBlockN) {
        MaskEarlierQueries<kBlockM>(s, m * kBlockM, t, key0);
      }
      PackFragments<kF16, kBlockM>(s, pa);
    };
    // dV += P^T dO (B = dO, MN-major: N = head dim contiguous).
    auto gemm_dv = [&](int it) {
      const uint32_t dob = do_base + (it % kStages) * Cfg::kQBytes;
      WgmmaFence();
      TileGemmRegsA<kD, kBlockM, kF16>(dv, pa, dob);
      WgmmaCommit();
    };
    // dS^T = P^T (dP^T - delta), packed into dsa.
    auto compute_ds = [&](int it) {
      const float* delta_s = sm.delta + (it % kStages) * kBlockM;
      DsTransposed<kBlockM>(dp, s, delta_s, t);
      PackFragments<kF16, kBlockM>(dp, dsa);
    };
    // dK += dS^T Q (B = Q, MN-major).
    auto gemm_dk = [&](int it) {
      const uint32_t qb = q_base + (it % kStages) * Cfg::kQBytes;
      WgmmaFence();
      TileGemmRegsA<kD, kBlockM, kF16>(dk, dsa, qb);
      WgmmaCommit();
    };
    auto release = [&](int it) {
      __syncwarp();
      if (lane == 0) MbarArrive(&sm.q_empty[it % kStages]);
    };
    auto wait_full = [&](int it) { MbarWait(&sm.q_full[it % kStages], (it / kStages) & 1); };

    MbarWait(sm.kv_full, 0);
    if constexpr (kExt) {
      const int32_t* info_smem = reinterpret_cast<const int32_t*>(smem + Cfg::kOffInfo);
      const int32_t* seg_smem = reinterpret_cast<const int32_t*>(smem + Cfg::kOffSeg);
      // Masks the block's S^T: this thread's key rows get the queries that may
      // see them (and with kSeg their segment ids). Worked out per masked
      // block (and whether a block needs it, by the producer), not held
      // across the loop: the D = 128 consumers have no registers to spare
      // (ptxas spilled).
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
      // Bias: the warp's 16 keys for each query block.
      BwdBiasWalk<BwdBiasStageT<kBlockM>> bias_walk;
      if constexpr (kBias) {
        const FwdBiasParams& bp = p.bias.bias;
        const int w_key0 = cta.n_block * kBlockN + cw * 64 + warp * 16;
        bias_walk.stage = SmemAddr(smem + Cfg::kOffBias) + (cw * 4 + warp) * BwdBiasStageT<kBlockM>::kBytes;
        bias_walk.valid = max(0, min(16, p.kv_len - w_key0));
        bias_walk.base = static_cast<const uint8_t*>(bp.data) +
                         2 * (cta.b * bp.stride_b + cta.h * bp.stride_h + (bias_walk.valid > 0 ? w_key0 : 0));
      }
      for (int it = 0;; ++it) {
        wait_full(it);
        const int st = it % kStages;
        const int info = info_smem[st];
        if (info < 0) break;  // the terminator
        gemm_s_dp(it);
        WgmmaWait<1>();  // S^T
        FenceRegs(s);
        // Softcap, the mask where the block needs one (kind 1: the range,
        // kind 2: range and segments), then P^T.
        const int q0 = (info >> 2) * kBlockM;
        if (softcap) FwdSoftcap(s, p.mask.softcap, p.mask.softcap_scale);
        if constexpr (kBias) bias_walk.Add(s, p.bias.bias, info >> 2, kBlockM, p.q_len, lane);
        if ((info & 3) == 2) {
          mask_block(std::true_type{}, q0, seg_smem + st * kBlockM);
        } else if ((info & 3) == 1) {
          mask_block(std::false_type{}, q0, seg_smem);
        }
        const float* lse_s = sm.lse + st * kBlockM;
        ProbsTransposed<kBlockM, kF16, kBias>(s, lse_s, t, scale_log2);
        // Unlike the dense loop, dS^T comes before the dV gemm, so P^T (s)
        // and its packed copy are not live together with dS^T: at 232
        // registers (the producer's votes need 40) the dense order spilled.
        WgmmaWait<0>();  // dP^T
        FenceRegs(dp);
        DsTransposed<kBlockM>(dp, s, sm.delta + st * kBlockM, t);
        if (softcap) BwdSoftcapDsTransposed<kBlockM>(dp, s, lse_s, t, p.inv_cap_log2e);
        PackFragments<kF16, kBlockM>(s, pa);
        PackFragments<kF16, kBlockM>(dp, dsa);
        gemm_dv(it);
        gemm_dk(it);
        WgmmaWait<0>();
        FenceRegs(dv);
        FenceRegs(dk);
        release(it);
      }
      if constexpr (kBias) CpAsyncWaitAll();  // the predicted copy below the last block
    } else if constexpr (!kOverlap) {
      for (int it = 0; it < cta.m_count; ++it) {
        wait_full(it);
        gemm_s_dp(it);
        WgmmaWait<1>();  // S^T
        FenceRegs(s);
        compute_p(it);
        gemm_dv(it);
        WgmmaWait<1>();  // dP^T (dV may still run)
        FenceRegs(dp);
        compute_ds(it);
        gemm_dk(it);
        WgmmaWait<0>();
        FenceRegs(dv);
        FenceRegs(dk);
        release(it);
      }
    } else {
      // The next block's S^T / dP^T gemms queue behind this block's dV / dK
      // gemms, so the tensor cores need not wait for the softmax math.
      // No wgmma may be in flight across the loop's back edge (ptxas then
      // serializes all wgmmas), so the loop turns right after a full wait.
      wait_full(0);
      gemm_s_dp(0);
      WgmmaWait<0>();
      FenceRegs(s);
      FenceRegs(dp);
      for (int it = 0; it < cta.m_count - 1; ++it) {
        compute_p(it);
        gemm_dv(it);
        compute_ds(it);  // while dV(it) runs
        gemm_dk(it);
        WgmmaWait<1>();  // dV(it): frees the P registers (register pressure)
        wait_full(it + 1);
        gemm_s_dp(it + 1);  // queued behind dK(it)
        WgmmaWait<0>();
        FenceRegs(s);
        FenceRegs(dp);
        release(it);
      }
      compute_p(cta.m_count - 1);
      gemm_dv(cta.m_count - 1);
      compute_ds(cta.m_count - 1);
      gemm_dk(cta.m_count - 1);
      WgmmaWait<0>();
      FenceRegs(dv);
      FenceRegs(dk);
      release(cta.m_count - 1);
    }

    // ---------------------------- epilogue ----------------------------
    StoreDkDvRows<kD, kD, kF16>(p, dk, dv, cta.b, cta.h, cta.hk, key0, t, 0);
  }
}

}  // namespace jaxdnn::attention::sm90
