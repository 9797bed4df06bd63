// The sm90 backward's dQ kernel (see attention_sm90_backward.cuh).
#pragma once

#include "attention/hopper/attention_sm90_backward_common.cuh"
#include "attention/hopper/sm90_tile_gemm.cuh"

namespace jaxdnn::attention::sm90 {

// ---------------------------------------------------------------------------
// 3. dQ.
template <int kD, int kBlockN_>
struct DqConfig {
  static_assert(kD == 64 || kD == 128, "head dim 64 or 128");
  static constexpr int kThreads = 384;
  static constexpr int kBlockM = 128;  // queries per CTA (2 consumers x 64)
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kBlockN_ == 64 ? 3 : 2;
  static constexpr int kDBlocks = kD / 64;
  static constexpr int kQBytes = kBlockM * kD * 2;
  static constexpr int kKVBytes = kBlockN * kD * 2;
  static constexpr int kOffQ = 0;
  static constexpr int kOffDO = kOffQ + kQBytes;
  static constexpr int kOffK = kOffDO + kQBytes;
  static constexpr int kOffV = kOffK + kStages * kKVBytes;
  static constexpr int kOffBar = kOffV + kStages * kKVBytes;
  static constexpr int kNumBars = 1 + 2 * kStages;
  static constexpr int kSmemBytes = kOffBar + kNumBars * 8 + 1024;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
};

template <int kD, bool kF16, int kBlockN_, bool kOverlap>
__global__ void __launch_bounds__(384, 1)
    AttnBwdDqSm90Kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                        const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                        const BwdParams p) {
  using Cfg = DqConfig<kD, kBlockN_>;
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
  const int n_blocks = p.causal ? min(kv_blocks, ((m_block + 1) * kBlockM + kBlockN - 1) / kBlockN) : kv_blocks;

  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);

  if (threadIdx.x == 0) {
    MbarInit(q_full, 1);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      MbarInit(&kv_full[s], 1);
      MbarInit(&kv_empty[s], 8);
    }
    FenceMbarInit();
    PrefetchTmaDescriptor(&tm_q);
    PrefetchTmaDescriptor(&tm_k);
    PrefetchTmaDescriptor(&tm_v);
    PrefetchTmaDescriptor(&tm_do);
  }
  __syncthreads();

  if (warpgroup == 0) {
    SetMaxNRegDec<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) {
      MbarArriveExpectTx(q_full, 2 * Cfg::kQBytes);
      TmaLoadHeadRows<kDBlocks, kBlockM>(smem_q, &tm_q, q_full, h, m_block * kBlockM, b);
      TmaLoadHeadRows<kDBlocks, kBlockM>(smem_do, &tm_do, q_full, h, m_block * kBlockM, b);
      for (int it = 0; it < n_blocks; ++it) {
        const int st = it % kStages;
        const uint32_t ph = (it / kStages) & 1;
        MbarWait(&kv_empty[st], ph ^ 1);
        MbarArriveExpectTx(&kv_full[st], 2 * Cfg::kKVBytes);
        TmaLoadHeadRows<kDBlocks, kBlockN>(smem_k + st * Cfg::kKVBytes, &tm_k, &kv_full[st], hk, it * kBlockN, b);
        TmaLoadHeadRows<kDBlocks, kBlockN>(smem_v + st * Cfg::kKVBytes, &tm_v, &kv_full[st], hk, it * kBlockN, b);
      }
    }
  } else {
    SetMaxNRegInc<Cfg::kConsumerRegs>();
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
          s[4 * j + 2 * r + 0] = exp2f(fmaf(s[4 * j + 2 * r + 0], scale_log2, -lse2[r]));
          s[4 * j + 2 * r + 1] = exp2f(fmaf(s[4 * j + 2 * r + 1], scale_log2, -lse2[r]));
        }
      }
      const bool need_mask = (it + 1) * kBlockN > p.kv_len ||
                             (p.causal && (it + 1) * kBlockN - 1 > m_block * kBlockM);
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
    if constexpr (!kOverlap) {
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
      uint16_t* gq = static_cast<uint16_t*>(p.dq) + ((static_cast<int64_t>(b) * p.q_len + row) * p.heads + h) * kD;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        *reinterpret_cast<uint32_t*>(gq + 8 * j + 2 * t) =
            PackPair<kF16>(dq[4 * j + 2 * r] * scale, dq[4 * j + 2 * r + 1] * scale);
      }
    }
  }
}

}  // namespace jaxdnn::attention::sm90
