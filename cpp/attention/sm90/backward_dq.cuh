// The sm90 backward's dQ kernel (see attention/sm90/backward.cuh).
#pragma once

#include "attention/sm90/backward_common.cuh"
#include "attention/sm90/backward_pipeline_init.cuh"
#include "attention/sm90/backward_mask.cuh"
#include "attention/sm90/blocks.cuh"

namespace jaxdnn::attention::sm90 {

// ---------------------------------------------------------------------------
// 3. dQ.
template <int kD, int kBlockN_>
struct DqConfig {
  // Head dims 192 and 256: 32-key steps (kBlockN_ = 32) in 3 stages, so that
  // Q and dO (96 / 128 KB) and the K/V ring (72 / 96 KB) fit; dq is 96 / 128
  // registers per thread.
  static_assert(kD == 64 || kD == 96 || kD == 128 || ((kD == 192 || kD == 256) && kBlockN_ == 32),
                "head dim 64, 96, 128, 192 or 256");
  static constexpr int kThreads = 384;
  static constexpr int kBlockM = 128;  // queries per CTA (2 consumers x 64)
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kD >= 192 ? 3 : (kBlockN_ == 64 ? 3 : 2);
  static constexpr int kDBlocks = (kD + 63) / 64;  // head dim 96: two panels, the second half zero
  static constexpr int kQBytes = kBlockM * kDBlocks * 128;
  static constexpr int kKVBytes = kBlockN * kDBlocks * 128;
  static constexpr int kOffQ = 0;
  static constexpr int kOffDO = kOffQ + kQBytes;
  static constexpr int kOffK = kOffDO + kQBytes;
  static constexpr int kOffV = kOffK + kStages * kKVBytes;
  static constexpr int kOffBar = kOffV + kStages * kKVBytes;
  static constexpr int kNumBars = 1 + 2 * kStages;
  static constexpr int kSmemBytes = kOffBar + kNumBars * 8 + 1024;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  // Extended path: per ring stage, the key block's info word (n * 4 + kind,
  // -1 = the terminator) and its kBlockN key segment ids.
  static constexpr int kOffInfo = kOffBar + 96;
  static constexpr int kOffSeg = kOffBar + 128;
  static_assert(kNumBars * 8 <= 96 && kStages * 4 <= 32, "ext smem slots");
  static constexpr int kSmemBytesExt = kOffSeg + kStages * kBlockN * 4 + 1024;
  // Bias (kBias): each consumer warp's stage after the ext slots.
  static constexpr int kOffBias = (kOffSeg + kStages * kBlockN * 4 + 127) / 128 * 128;
  static constexpr int kSmemBytesBias = kOffBias + 8 * FwdBiasStage<kBlockN>::kBytes + 1024;
  static constexpr int kProducerRegsExt = 40;
  static constexpr int kConsumerRegsExt = 232;
  static_assert(kProducerRegsExt + 2 * kConsumerRegsExt <= 3 * 168, "register split (ext)");
};

// kExt: the extended path, as in the dK/dV kernel: the producer warp walks
// the query tile's band of key blocks (FwdTileBlocks) from the top down with
// segment votes 32 blocks at a time, one info slot per ring stage and a
// terminator; a tile no key is left to writes zeros. The dense
// instantiations (kExt = false) are the code they were before; kExt runs
// without kOverlap.
// kBias (with kExt): the scores with the bias (attention/sm90/backward_bias.cuh),
// and dS stored into p.bias.dbias_full.
template <int kD, bool kF16, int kBlockN_, bool kOverlap, bool kExt = false, bool kBias = false>
__global__ void __launch_bounds__(384, 1)
    AttnBwdDqSm90Kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                        const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                        const BwdKernelParams<kExt> p) {
  static_assert(!(kExt && kOverlap), "the extended path runs without overlap");
  static_assert(!kBias || (kExt && kBlockN_ % 64 == 0), "bias: the extended path, 64- or 128-key steps");
  using Cfg = DqConfig<kD, kBlockN_>;
  static_assert(!kBias || Cfg::kSmemBytesBias <= 227 * 1024, "shared memory per CTA (bias)");
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kStages = Cfg::kStages;
  constexpr int kDBlocks = Cfg::kDBlocks;
  constexpr float kLog2e = 1.4426950408889634f;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  uint8_t* smem_q = smem + Cfg::kOffQ;
  uint8_t* smem_do = smem + Cfg::kOffDO;
  uint8_t* smem_k = smem + Cfg::kOffK;
  uint8_t* smem_v = smem + Cfg::kOffV;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBar);
  uint64_t* q_full = bars;
  uint64_t* kv_full = bars + 1;
  uint64_t* kv_empty = bars + 1 + kStages;

  const int num_m = (p.q_len + kBlockM - 1) / kBlockM;
  // Block order: head-major (query blocks of one (batch, head) adjacent: they
  // share K and V in L2) or query-block-major (grid y); heaviest (causal) first.
  const int m_rev = p.head_major ? static_cast<int>(blockIdx.x) % num_m : static_cast<int>(blockIdx.y);
  const int bh = p.head_major ? static_cast<int>(blockIdx.x) / num_m : static_cast<int>(blockIdx.x);
  const int m_block = num_m - 1 - m_rev;
  const int h = bh % p.heads;
  const int b = bh / p.heads;
  const int hk = h / p.group;
  const int kv_blocks = (p.kv_len + kBlockN - 1) / kBlockN;
  const int n_blocks =
      p.causal ? min(kv_blocks, ((m_block + 1) * kBlockM + kBlockN - 1) / kBlockN) : kv_blocks;

  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);

  InitBwdPipeline<kStages>(q_full, kv_full, 1, kv_empty, &tm_q, &tm_k, &tm_v, &tm_do, [] {});

  if (warpgroup == 0) {
    SetMaxNRegDec<kExt ? Cfg::kProducerRegsExt : Cfg::kProducerRegs>();
    if constexpr (kExt) {
      if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        int32_t* info_smem = reinterpret_cast<int32_t*>(smem + Cfg::kOffInfo);
        int32_t* seg_smem = reinterpret_cast<int32_t*>(smem + Cfg::kOffSeg);
        const int q0 = m_block * kBlockM;
        if (lane == 0) {
          MbarArriveExpectTx(q_full, 2 * Cfg::kQBytes);
          TmaLoadHeadRows<kDBlocks, kBlockM>(smem_q, &tm_q, q_full, h, q0, b);
          TmaLoadHeadRows<kDBlocks, kBlockM>(smem_do, &tm_do, q_full, h, q0, b);
        }
        const FwdRowGeom geo = FwdGeom(p.mask, b, p.q_len, p.kv_len);
        int n_lo, n_hi;
        FwdTileBlocks<kBlockM, kBlockN>(p.mask, geo, p.causal, q0, n_lo, n_hi);
        const bool has_seg = p.mask.q_segments != nullptr;
        int seg_min = 0, seg_max = 0;  // of the tile's valid queries
        if (has_seg && n_hi > n_lo) {
          FwdQuerySegmentRange(p.mask.q_segments + static_cast<int64_t>(b) * p.q_len, q0,
                               min(q0 + kBlockM, geo.q_valid) - 1, lane, seg_min, seg_max);
        }
        const int32_t* kv_ids = has_seg ? p.mask.kv_segments + static_cast<int64_t>(b) * p.kv_len : nullptr;
        int it = 0;
        for (int n_top = n_hi - 1; n_top >= n_lo; n_top -= 32) {
          unsigned may_bits = 0xffffffffu, same_bits = 0xffffffffu;  // no segments: all kind 1
          if (has_seg) {
            FwdVoteSegmentChunk<kBlockN>(kv_ids, n_top, n_lo, geo.kv_valid, seg_min, seg_max, lane, may_bits,
                                         same_bits);
          }
          const int count = min(32, n_top - n_lo + 1);
          for (int k = 0; k < count; ++k) {
            if (((may_bits >> k) & 1u) == 0) continue;  // warp-uniform skip
            const int n = n_top - k;
            const int kind = ((same_bits >> k) & 1u) ? 1 : 2;
            int ids[kBlockN / 32];
            if (kind == 2) BwdLoadSegments<kBlockN>(kv_ids, n * kBlockN, geo.kv_valid, lane, ids);
            const int st = it % kStages;
            const uint32_t ph = (it / kStages) & 1;
            // The slot is free once every consumer warp released the stage
            // (they read the slot before that release).
            if (lane == 0) MbarWait(&kv_empty[st], ph ^ 1);
            __syncwarp();
            if (kind == 2) BwdStoreSegments<kBlockN>(ids, lane, seg_smem + st * kBlockN);
            if (lane == 0) info_smem[st] = n * 4 + kind;
            __syncwarp();
            if (lane == 0) {
              MbarArriveExpectTx(&kv_full[st], 2 * Cfg::kKVBytes);
              TmaLoadHeadRows<kDBlocks, kBlockN>(smem_k + st * Cfg::kKVBytes, &tm_k, &kv_full[st], hk,
                                                 n * kBlockN, b);
              TmaLoadHeadRows<kDBlocks, kBlockN>(smem_v + st * Cfg::kKVBytes, &tm_v, &kv_full[st], hk,
                                                 n * kBlockN, b);
            }
            ++it;
          }
        }
        // The terminator slot: no data, info -1.
        if (lane == 0) {
          const int st = it % kStages;
          MbarWait(&kv_empty[st], ((it / kStages) & 1) ^ 1);
          info_smem[st] = -1;
          MbarArrive(&kv_full[st]);
        }
      }
    } else if (threadIdx.x == 0) {
      MbarArriveExpectTx(q_full, 2 * Cfg::kQBytes);
      TmaLoadHeadRows<kDBlocks, kBlockM>(smem_q, &tm_q, q_full, h, m_block * kBlockM, b);
      TmaLoadHeadRows<kDBlocks, kBlockM>(smem_do, &tm_do, q_full, h, m_block * kBlockM, b);
      for (int it = 0; it < n_blocks; ++it) {
        const int st = it % kStages;
        const uint32_t ph = (it / kStages) & 1;
        MbarWait(&kv_empty[st], ph ^ 1);
        MbarArriveExpectTx(&kv_full[st], 2 * Cfg::kKVBytes);
        TmaLoadHeadRows<kDBlocks, kBlockN>(smem_k + st * Cfg::kKVBytes, &tm_k, &kv_full[st], hk, it * kBlockN,
                                           b);
        TmaLoadHeadRows<kDBlocks, kBlockN>(smem_v + st * Cfg::kKVBytes, &tm_v, &kv_full[st], hk, it * kBlockN,
                                           b);
      }
    }
  } else {
    SetMaxNRegInc<kExt ? Cfg::kConsumerRegsExt : Cfg::kConsumerRegs>();
    const int cw = warpgroup - 1;
    const int tid = threadIdx.x % 128;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int g = lane / 4;
    const int t = lane % 4;

    const uint32_t q_base = SmemAddr(smem_q) + cw * 64 * 128;
    const uint32_t do_base = SmemAddr(smem_do) + cw * 64 * 128;
    const uint32_t k_base = SmemAddr(smem_k);
    const uint32_t v_base = SmemAddr(smem_v);
    const float scale_log2 = p.scale_log2;
    const int row0 = m_block * kBlockM + cw * 64 + warp * 16 + g;  // +8 for r = 1

    float lse2[2], dl[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      const int64_t o = (static_cast<int64_t>(b) * p.heads + h) * p.q_len + row;
      lse2[r] = row < p.q_len ? p.lse[o] * kLog2e : INFINITY;
      dl[r] = row < p.q_len ? p.delta[o] : 0.f;
    }

    float dq[kD / 2];
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) dq[i] = 0.f;
    float s[kBlockN / 2];
    float dp[kBlockN / 2];
    uint32_t dsa[kBlockN / 16][4];

    auto gemm_s_dp = [&](int it) {
      const int st = it % kStages;
      const uint32_t kb = k_base + st * Cfg::kKVBytes;
      const uint32_t vb = v_base + st * Cfg::kKVBytes;
      WgmmaFence();
      TileGemmKMajor<kBlockN, kD, kF16, kBlockM, kBlockN>(s, q_base, kb);
      WgmmaCommit();
      TileGemmKMajor<kBlockN, kD, kF16, kBlockM, kBlockN>(dp, do_base, vb);
      WgmmaCommit();
    };
    auto compute_p = [&](int it) {
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          s[4 * j + 2 * r + 0] = ProbFromLogit<kF16>(fmaf(s[4 * j + 2 * r + 0], scale_log2, -lse2[r]));
          s[4 * j + 2 * r + 1] = ProbFromLogit<kF16>(fmaf(s[4 * j + 2 * r + 1], scale_log2, -lse2[r]));
        }
      }
      const bool need_mask =
          (it + 1) * kBlockN > p.kv_len || (p.causal && (it + 1) * kBlockN - 1 > m_block * kBlockM);
      if (need_mask) {
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int col = it * kBlockN + 8 * j + 2 * t + e;
              if (col >= p.kv_len || (p.causal && col > row0 + 8 * r)) s[4 * j + 2 * r + e] = 0.f;
            }
          }
        }
      }
    };
    auto compute_ds = [&]() {
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int i0 = 8 * kk + 2 * q;
          const int r = q & 1;
          dsa[kk][q] = PackPair<kF16>(s[i0] * (dp[i0] - dl[r]), s[i0 + 1] * (dp[i0 + 1] - dl[r]));
        }
      }
    };
    // dQ += dS K (B = K, MN-major).
    auto gemm_dq = [&](int it) {
      const uint32_t kb = k_base + (it % kStages) * Cfg::kKVBytes;
      WgmmaFence();
      TileGemmRegsA<kD, kBlockN, kF16>(dq, dsa, kb);
      WgmmaCommit();
    };
    auto release = [&](int it) {
      __syncwarp();
      if (lane == 0) MbarArrive(&kv_empty[it % kStages]);
    };
    auto wait_full = [&](int it) { MbarWait(&kv_full[it % kStages], (it / kStages) & 1); };

    MbarWait(q_full, 0);
    if constexpr (kExt) {
      const int32_t* info_smem = reinterpret_cast<const int32_t*>(smem + Cfg::kOffInfo);
      const int32_t* seg_smem = reinterpret_cast<const int32_t*>(smem + Cfg::kOffSeg);
      // This thread's rows: allowed keys and query segment ids (a row with
      // no key has lse -inf: +inf here, so its P is 0); the key columns all
      // 64 rows of the warpgroup see.
      const FwdRowGeom geo = FwdGeom(p.mask, b, p.q_len, p.kv_len);
      int lo[2], hi[2], qid[2] = {0, 0};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + 8 * r;
        FwdRowKeys(p.mask, geo, p.causal, row, lo[r], hi[r]);
        if (p.mask.q_segments != nullptr && row < geo.q_valid) {
          qid[r] = __ldg(p.mask.q_segments + static_cast<int64_t>(b) * p.q_len + row);
        }
        if (row < p.q_len) {
          const float l = p.lse[(static_cast<int64_t>(b) * p.heads + h) * p.q_len + row];
          lse2[r] = kBias ? BwdLseNat(l) : BwdLse2(l);  // kBias: natural units
        }
      }
      int full_lo, full_hi;
      BwdFullColumns<64>(
          m_block * kBlockM + cw * 64, geo.q_valid,
          [&](int row, int& l, int& u) { FwdRowKeys(p.mask, geo, p.causal, row, l, u); }, full_lo, full_hi);
      const bool softcap = p.mask.softcap > 0.f;
      const float inv_cap_log2e = p.inv_cap_log2e;
      // Bias: the warp's 16 query rows; dS rows in dbias_full. No target: a
      // bias whose gradient nobody wants (a boolean mask sent as 0 / -inf).
      const int w_row0 = m_block * kBlockM + cw * 64 + warp * 16;
      BwdBiasWalk<BwdBiasStageRows<kBlockN>> bias_walk;
      float* ds_rows = nullptr;
      const bool want_ds = kBias && p.bias.target != nullptr;
      if constexpr (kBias) {
        const FwdBiasParams& bp = p.bias.bias;
        bias_walk.stage = SmemAddr(smem + Cfg::kOffBias) + (cw * 4 + warp) * FwdBiasStage<kBlockN>::kBytes;
        bias_walk.valid = max(0, min(16, p.q_len - w_row0));
        bias_walk.base = static_cast<const uint8_t*>(bp.data) +
                         2 * (b * bp.stride_b + h * bp.stride_h +
                              static_cast<long long>(bias_walk.valid > 0 ? w_row0 : 0) * bp.stride_t);
        if (want_ds) {
          ds_rows = p.bias.target + b * p.bias.slice_b + h * p.bias.slice_h +
                    static_cast<int64_t>(w_row0) * p.kv_len;  // the warp's first row
        }
      }
      // A chain's later contributor adds after its predecessor's same warp
      // (see BwdBiasParams); the first zero-fills the blocks outside the
      // band (above it, between skipped ones, below it) as the walk passes.
      const int pred = want_ds ? BwdBiasPredecessor(p.bias, b, h, p.heads) : -1;
      const int n_tiles = (p.q_len + kBlockM - 1) / kBlockM;
      auto progress = [&](int bh_of) {
        return p.bias.progress + ((static_cast<int64_t>(bh_of) * n_tiles + m_block) * 8 + cw * 4 + warp);
      };
      int zero_above = 0;  // the first: blocks from here up are done
      if constexpr (kBias) {
        if (want_ds && pred < 0) {
          int n_lo, n_hi;
          FwdTileBlocks<kBlockM, kBlockN>(p.mask, geo, p.causal, m_block * kBlockM, n_lo, n_hi);
          BwdZeroDs(ds_rows, p.kv_len, bias_walk.valid, n_hi * kBlockN, p.kv_len, lane);
          zero_above = n_hi;
        }
      }
      for (int it = 0;; ++it) {
        wait_full(it);
        const int st = it % kStages;
        const int info = info_smem[st];
        if (info < 0) break;  // the terminator
        gemm_s_dp(it);
        WgmmaWait<1>();
        FenceRegs(s);
        // Softcap, the mask where the block needs one, then P.
        const int n0 = (info >> 2) * kBlockN;
        if (softcap) FwdSoftcap(s, p.mask.softcap, p.mask.softcap_scale);
        if constexpr (kBias) bias_walk.Add(s, p.bias.bias, info >> 2, kBlockN, p.kv_len, lane);
        if ((info & 3) == 2) {
          FwdMaskBlock<true>(s, n0, lo, hi, t, seg_smem + st * kBlockN, qid);
        } else if (!(n0 >= full_lo && n0 + kBlockN <= full_hi)) {
          FwdMaskBlock<false>(s, n0, lo, hi, t, seg_smem, qid);
        }
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            s[4 * j + 2 * r + 0] =
                ProbFromLogit<kF16>(BwdExponent<kBias>(s[4 * j + 2 * r + 0], scale_log2, lse2[r]));
            s[4 * j + 2 * r + 1] =
                ProbFromLogit<kF16>(BwdExponent<kBias>(s[4 * j + 2 * r + 1], scale_log2, lse2[r]));
          }
        }
        WgmmaWait<0>();
        FenceRegs(dp);
        if constexpr (kBias) {
          if (pred >= 0) {
            BwdWaitProgress(progress(pred), it + 1);
          } else if (want_ds) {
            BwdZeroDs(ds_rows, p.kv_len, bias_walk.valid, n0 + kBlockN, zero_above * kBlockN, lane);
            zero_above = info >> 2;
          }
        }
        // dS = P (dP - delta) (times the softcap factor), packed.
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int i0 = 8 * kk + 2 * q;
            const int r = q & 1;
            float d0 = s[i0] * (dp[i0] - dl[r]);
            float d1 = s[i0 + 1] * (dp[i0 + 1] - dl[r]);
            if (softcap) {
              d0 *= BwdSoftcapFactor(s[i0], lse2[r], inv_cap_log2e);
              d1 *= BwdSoftcapFactor(s[i0 + 1], lse2[r], inv_cap_log2e);
            }
            if constexpr (kBias) {
              // dbias = dS: element i0 is (row0 + 8 r, n0 + 8 (2 kk + q / 2) + 2 t).
              if (want_ds && row0 + 8 * r < p.q_len) {
                float* row = ds_rows + (g + 8 * r) * static_cast<int64_t>(p.kv_len);
                const int col = n0 + 16 * kk + 8 * (q / 2) + 2 * t;
                BwdStoreDsPair(row, col, p.kv_len, d0, d1, pred >= 0);
              }
            }
            dsa[kk][q] = PackPair<kF16>(d0, d1);
          }
        }
        if constexpr (kBias) {
          if (p.bias.progress != nullptr) BwdPostProgress(progress(b * p.heads + h), it + 1, lane);
        }
        gemm_dq(it);
        WgmmaWait<0>();
        FenceRegs(dq);
        release(it);
      }
      if constexpr (kBias) {
        CpAsyncWaitAll();  // the predicted copy below the last block
        if (want_ds && pred < 0) BwdZeroDs(ds_rows, p.kv_len, bias_walk.valid, 0, zero_above * kBlockN, lane);
      }
    } else if constexpr (!kOverlap) {
      for (int it = 0; it < n_blocks; ++it) {
        wait_full(it);
        gemm_s_dp(it);
        WgmmaWait<1>();
        FenceRegs(s);
        compute_p(it);
        WgmmaWait<0>();
        FenceRegs(dp);
        compute_ds();
        gemm_dq(it);
        WgmmaWait<0>();
        FenceRegs(dq);
        release(it);
      }
    } else {
      // The next block's S / dP gemms queue behind this block's dQ gemm.
      // No wgmma in flight across the loop's back edge (see the dK/dV kernel).
      wait_full(0);
      gemm_s_dp(0);
      WgmmaWait<1>();
      FenceRegs(s);
      compute_p(0);
      WgmmaWait<0>();
      FenceRegs(dp);
      for (int it = 0; it < n_blocks - 1; ++it) {
        compute_ds();
        gemm_dq(it);
        wait_full(it + 1);
        gemm_s_dp(it + 1);  // queued behind dQ(it)
        WgmmaWait<1>();     // dQ(it), S(it+1)
        FenceRegs(s);
        release(it);
        compute_p(it + 1);  // while dP(it+1) runs
        WgmmaWait<0>();
        FenceRegs(dp);
      }
      compute_ds();
      gemm_dq(n_blocks - 1);
      WgmmaWait<0>();
      FenceRegs(dq);
      release(n_blocks - 1);
    }

    const float scale = p.scale;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      if (row >= p.q_len) continue;
      uint16_t* gq =
          static_cast<uint16_t*>(p.dq) + ((static_cast<int64_t>(b) * p.q_len + row) * p.heads + h) * kD;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        *reinterpret_cast<uint32_t*>(gq + 8 * j + 2 * t) =
            PackPair<kF16>(dq[4 * j + 2 * r] * scale, dq[4 * j + 2 * r + 1] * scale);
      }
    }
  }
}

}  // namespace jaxdnn::attention::sm90
