// Hopper (sm_90a) attention backward, dense case (same support as the sm90
// forward: no bias/mask/lengths/segments/softcap/dropout/window/dlse; causal
// only with q_len == kv_len; head dim 64 or 128; bf16 or f16). Deterministic:
// no atomics, every sum has a fixed order.
//
// Three kernels (plus a fixed-order GQA reduction when heads > kv_heads):
//  1. AttnBwdDeltaKernel: delta[b,h,i] = sum_d dout * out (float32).
//  2. AttnBwdDkDvSm90Kernel: one CTA per (128-key block, query head, batch);
//     warpgroup 0 = producer (K, V once; Q, dO blocks of 64 queries plus their
//     lse*log2e and delta into a kStages ring), warpgroups 1, 2 = consumers of
//     64 keys each. Per query block, all wgmma:
//        S^T  = K Q^T          (A = K smem, B = Q smem, both K-major)
//        P^T  = exp2(S^T * scale*log2e - lse*log2e)
//        dP^T = V dO^T         (A = V smem, B = dO smem, K-major)
//        dV  += P^T dO         (A = P^T registers, B = dO MN-major)
//        dS^T = P^T (dP^T - delta)
//        dK  += dS^T Q         (A = dS^T registers, B = Q MN-major)
//     Epilogue: dK *= scale; dk/dv in the data type (one query head per kv
//     head), or float32 per-query-head partials in the workspace (GQA).
//  3. AttnBwdDqSm90Kernel: one CTA per (128-query block, head, batch), like the
//     forward: Q, dO once, K, V blocks of kBlockN keys in a 2-stage ring;
//     S = Q K^T, P, dP = dO V^T, dS, dQ += dS K (B = K MN-major); dq *= scale.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "attention/hopper/sm90_ptx.cuh"

namespace jaxdnn::attention::sm90 {

struct BwdParams {
  int batch, q_len, kv_len, heads, kv_heads, group;
  int causal;
  int head_major;    // block order, see the kernels
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e)
  const void* out;   // [batch, q_len, heads, D]
  const void* dout;  // [batch, q_len, heads, D]
  const float* lse;  // [batch, heads, q_len]
  float* delta;      // [batch, heads, q_len] (workspace)
  void* dq;          // [batch, q_len, heads, D]
  void* dk;          // [batch, kv_len, kv_heads, D]
  void* dv;
  float* dk_part;    // [batch, kv_len, heads, D] float32, group > 1 only
  float* dv_part;
};

template <bool kF16>
__device__ __forceinline__ uint32_t BwdPack(float lo, float hi) {
  if constexpr (kF16) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

template <bool kF16>
__device__ __forceinline__ float BwdLoad(const uint16_t* p) {
  if constexpr (kF16) {
    return __half2float(*reinterpret_cast<const __half*>(p));
  } else {
    return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
  }
}

// ---------------------------------------------------------------------------
// 1. delta = rowsum(dout * out): one warp per (b, i, h) row, 16-byte loads.
template <int kD, bool kF16>
__global__ void __launch_bounds__(256) AttnBwdDeltaKernel(const BwdParams p) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.q_len * p.heads;
  if (row >= rows) return;
  // row = (b * q_len + i) * heads + h
  const uint16_t* o = static_cast<const uint16_t*>(p.out) + row * kD;
  const uint16_t* d = static_cast<const uint16_t*>(p.dout) + row * kD;
  float acc = 0.f;
  constexpr int kPer = kD / 32;  // 2 or 4 elements per lane
  if constexpr (kPer == 4) {
    const uint2 ov = *reinterpret_cast<const uint2*>(o + lane * 4);
    const uint2 dv = *reinterpret_cast<const uint2*>(d + lane * 4);
    const uint16_t* oe = reinterpret_cast<const uint16_t*>(&ov);
    const uint16_t* de = reinterpret_cast<const uint16_t*>(&dv);
#pragma unroll
    for (int e = 0; e < 4; ++e) acc += BwdLoad<kF16>(oe + e) * BwdLoad<kF16>(de + e);
  } else {
    const uint32_t ov = *reinterpret_cast<const uint32_t*>(o + lane * 2);
    const uint32_t dv = *reinterpret_cast<const uint32_t*>(d + lane * 2);
    const uint16_t* oe = reinterpret_cast<const uint16_t*>(&ov);
    const uint16_t* de = reinterpret_cast<const uint16_t*>(&dv);
#pragma unroll
    for (int e = 0; e < 2; ++e) acc += BwdLoad<kF16>(oe + e) * BwdLoad<kF16>(de + e);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    const int h = static_cast<int>(row % p.heads);
    const int64_t bi = row / p.heads;
    const int i = static_cast<int>(bi % p.q_len);
    const int b = static_cast<int>(bi / p.q_len);
    p.delta[(static_cast<int64_t>(b) * p.heads + h) * p.q_len + i] = acc;
  }
}

// ---------------------------------------------------------------------------
// 4. GQA: dk[b, j, hk, :] = sum over the group's query heads (fixed order) of
//    dk_part[b, j, h, :]; same for dv. One thread per 4 output elements.
template <int kD, bool kF16>
__global__ void __launch_bounds__(256) AttnBwdGroupReduceKernel(const BwdParams p) {
  const int64_t idx4 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total4 = static_cast<int64_t>(p.batch) * p.kv_len * p.kv_heads * kD / 4;
  if (idx4 >= total4) return;
  const int64_t e = idx4 * 4;
  const int d = static_cast<int>(e % kD);
  const int64_t r = e / kD;  // (b * kv_len + j) * kv_heads + hk
  const int hk = static_cast<int>(r % p.kv_heads);
  const int64_t bj = r / p.kv_heads;
  const int64_t src0 = (bj * p.heads + static_cast<int64_t>(hk) * p.group) * kD + d;
  float4 sk = make_float4(0.f, 0.f, 0.f, 0.f), sv = sk;
  for (int gi = 0; gi < p.group; ++gi) {
    const float4 a = *reinterpret_cast<const float4*>(p.dk_part + src0 + static_cast<int64_t>(gi) * kD);
    const float4 c = *reinterpret_cast<const float4*>(p.dv_part + src0 + static_cast<int64_t>(gi) * kD);
    sk.x += a.x; sk.y += a.y; sk.z += a.z; sk.w += a.w;
    sv.x += c.x; sv.y += c.y; sv.z += c.z; sv.w += c.w;
  }
  uint2 ok, ov;
  ok.x = BwdPack<kF16>(sk.x, sk.y);
  ok.y = BwdPack<kF16>(sk.z, sk.w);
  ov.x = BwdPack<kF16>(sv.x, sv.y);
  ov.y = BwdPack<kF16>(sv.z, sv.w);
  *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p.dk) + e) = ok;
  *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p.dv) + e) = ov;
}

// ---------------------------------------------------------------------------
// 2. dK / dV.
template <int kD>
struct DkDvConfig {
  static_assert(kD == 64 || kD == 128, "head dim 64 or 128");
  static constexpr int kThreads = 384;
  static constexpr int kBlockN = 128;  // keys per CTA (2 consumers x 64)
  static constexpr int kBlockM = 64;   // queries per pipeline step
  static constexpr int kStages = kD == 128 ? 3 : 4;
  static constexpr int kDBlocks = kD / 64;
  static constexpr int kKBytes = kBlockN * kD * 2;
  static constexpr int kQBytes = kBlockM * kD * 2;
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kKBytes;
  static constexpr int kOffQ = kOffV + kKBytes;
  static constexpr int kOffDO = kOffQ + kStages * kQBytes;
  static constexpr int kOffLse = kOffDO + kStages * kQBytes;
  static constexpr int kOffDelta = kOffLse + kStages * kBlockM * 4;
  static constexpr int kOffBar = kOffDelta + kStages * kBlockM * 4;
  static constexpr int kNumBars = 1 + 2 * kStages;
  static constexpr int kSmemBytes = kOffBar + kNumBars * 8 + 1024;
  static constexpr int kProducerRegs = 24;  // 24 + 2 x 240: the whole register file (setmaxnreg.inc would block otherwise)
  static constexpr int kConsumerRegs = 240;
};

template <int kD, bool kF16, bool kOverlap>
__global__ void __launch_bounds__(384, 1)
    AttnBwdDkDvSm90Kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                          const BwdParams p) {
  using Cfg = DkDvConfig<kD>;
  constexpr int kBlockN = Cfg::kBlockN, kBlockM = Cfg::kBlockM, kStages = Cfg::kStages;
  constexpr int kDBlocks = Cfg::kDBlocks;
  constexpr float kLog2e = 1.4426950408889634f;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  uint8_t* smem_k = smem + Cfg::kOffK;
  uint8_t* smem_v = smem + Cfg::kOffV;
  uint8_t* smem_q = smem + Cfg::kOffQ;
  uint8_t* smem_do = smem + Cfg::kOffDO;
  float* smem_lse = reinterpret_cast<float*>(smem + Cfg::kOffLse);
  float* smem_delta = reinterpret_cast<float*>(smem + Cfg::kOffDelta);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBar);
  uint64_t* kv_full = bars;
  uint64_t* q_full = bars + 1;
  uint64_t* q_empty = bars + 1 + kStages;

  // Block order: head-major (the kv blocks of one (batch, head) adjacent, so
  // they share Q and dO in L2) or kv-block-major (grid y; causal: n = 0, the
  // heaviest, first).
  const int num_n = (p.kv_len + kBlockN - 1) / kBlockN;
  const int n_block = p.head_major ? static_cast<int>(blockIdx.x) % num_n : static_cast<int>(blockIdx.y);
  const int bh = p.head_major ? static_cast<int>(blockIdx.x) / num_n : static_cast<int>(blockIdx.x);
  const int h = bh % p.heads;
  const int b = bh / p.heads;
  const int hk = h / p.group;
  const int num_m = (p.q_len + kBlockM - 1) / kBlockM;
  const int m_begin = p.causal ? (n_block * kBlockN) / kBlockM : 0;
  const int m_count = num_m - m_begin;

  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);

  if (threadIdx.x == 0) {
    MbarInit(kv_full, 1);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      MbarInit(&q_full[s], 32);  // every producer lane (lse/delta stores); lane 0 adds the tx
      MbarInit(&q_empty[s], 8);  // one arrival per consumer warp
    }
    FenceMbarInit();
    PrefetchTmaDescriptor(&tm_q);
    PrefetchTmaDescriptor(&tm_k);
    PrefetchTmaDescriptor(&tm_v);
    PrefetchTmaDescriptor(&tm_do);
  }
  __syncthreads();

  if (warpgroup == 0) {
    // ------------------------------ producer ------------------------------
    SetMaxNRegDec<Cfg::kProducerRegs>();
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x;
      if (lane == 0) {
        MbarArriveExpectTx(kv_full, 2 * Cfg::kKBytes);
#pragma unroll
        for (int db = 0; db < kDBlocks; ++db) {
          TmaLoad4d(smem_k + db * kBlockN * 128, &tm_k, kv_full, db * 64, hk, n_block * kBlockN, b);
          TmaLoad4d(smem_v + db * kBlockN * 128, &tm_v, kv_full, db * 64, hk, n_block * kBlockN, b);
        }
      }
      const float* lse_row = p.lse + (static_cast<int64_t>(b) * p.heads + h) * p.q_len;
      const float* delta_row = p.delta + (static_cast<int64_t>(b) * p.heads + h) * p.q_len;
      for (int it = 0; it < m_count; ++it) {
        const int m = m_begin + it;
        const int st = it % kStages;
        const uint32_t ph = (it / kStages) & 1;
        MbarWait(&q_empty[st], ph ^ 1);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int qi = m * kBlockM + lane + 32 * e;
          const bool in = qi < p.q_len;
          // Rows past q_len: P = exp2(-inf) = 0 (their Q, dO rows load as zeros).
          smem_lse[st * kBlockM + lane + 32 * e] = in ? lse_row[qi] * kLog2e : INFINITY;
          smem_delta[st * kBlockM + lane + 32 * e] = in ? delta_row[qi] : 0.f;
        }
        if (lane == 0) {
          MbarArriveExpectTx(&q_full[st], 2 * Cfg::kQBytes);
#pragma unroll
          for (int db = 0; db < kDBlocks; ++db) {
            TmaLoad4d(smem_q + st * Cfg::kQBytes + db * kBlockM * 128, &tm_q, &q_full[st], db * 64, h,
                      m * kBlockM, b);
            TmaLoad4d(smem_do + st * Cfg::kQBytes + db * kBlockM * 128, &tm_do, &q_full[st], db * 64, h,
                      m * kBlockM, b);
          }
        } else {
          MbarArrive(&q_full[st]);
        }
      }
    }
  } else {
    // ------------------------------ consumers ------------------------------
    SetMaxNRegInc<Cfg::kConsumerRegs>();
    const int cw = warpgroup - 1;
    const int tid = threadIdx.x % 128;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int g = lane / 4;
    const int t = lane % 4;

    const uint32_t k_base = SmemAddr(smem_k) + cw * 64 * 128;
    const uint32_t v_base = SmemAddr(smem_v) + cw * 64 * 128;
    const uint32_t q_base = SmemAddr(smem_q);
    const uint32_t do_base = SmemAddr(smem_do);
    const float scale_log2 = p.scale_log2;
    const int key0 = n_block * kBlockN + cw * 64 + warp * 16 + g;  // +8 for r = 1

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
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        const uint64_t da = MakeDescSw128(k_base + (kk / 4) * kBlockN * 128 + (kk % 4) * 32, 16, 1024);
        const uint64_t db = MakeDescSw128(qb + (kk / 4) * kBlockM * 128 + (kk % 4) * 32, 16, 1024);
        Wgmma<kBlockM, kF16>::SS(s, da, db, kk > 0 ? 1 : 0);
      }
      WgmmaCommit();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        const uint64_t da = MakeDescSw128(v_base + (kk / 4) * kBlockN * 128 + (kk % 4) * 32, 16, 1024);
        const uint64_t db = MakeDescSw128(dob + (kk / 4) * kBlockM * 128 + (kk % 4) * 32, 16, 1024);
        Wgmma<kBlockM, kF16>::SS(dp, da, db, kk > 0 ? 1 : 0);
      }
      WgmmaCommit();
    };
    // P^T in place of S^T (columns are queries), packed into pa.
    auto compute_p = [&](int it) {
      const int m = m_begin + it;
      const float* lse_s = smem_lse + (it % kStages) * kBlockM;
#pragma unroll
      for (int j = 0; j < kBlockM / 8; ++j) {
        const float2 l2 = *reinterpret_cast<const float2*>(lse_s + 8 * j + 2 * t);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          s[4 * j + 2 * r + 0] = exp2f(fmaf(s[4 * j + 2 * r + 0], scale_log2, -l2.x));
          s[4 * j + 2 * r + 1] = exp2f(fmaf(s[4 * j + 2 * r + 1], scale_log2, -l2.y));
        }
      }
      const bool need_mask = p.causal && m * kBlockM < (n_block + 1) * kBlockN;
      if (need_mask) {
#pragma unroll
        for (int j = 0; j < kBlockM / 8; ++j) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int qi = m * kBlockM + 8 * j + 2 * t + e;
              if (qi < key0 + 8 * r) s[4 * j + 2 * r + e] = 0.f;
            }
          }
        }
      }
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk) {
        pa[kk][0] = BwdPack<kF16>(s[8 * kk + 0], s[8 * kk + 1]);
        pa[kk][1] = BwdPack<kF16>(s[8 * kk + 2], s[8 * kk + 3]);
        pa[kk][2] = BwdPack<kF16>(s[8 * kk + 4], s[8 * kk + 5]);
        pa[kk][3] = BwdPack<kF16>(s[8 * kk + 6], s[8 * kk + 7]);
      }
    };
    // dV += P^T dO (B = dO, MN-major: N = head dim contiguous).
    auto gemm_dv = [&](int it) {
      const uint32_t dob = do_base + (it % kStages) * Cfg::kQBytes;
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk) {
        const uint64_t dd = MakeDescSw128(dob + kk * 16 * 128, kBlockM * 128, 1024);
        Wgmma<kD, kF16>::RS(dv, pa[kk], dd, 1);
      }
      WgmmaCommit();
    };
    // dS^T = P^T (dP^T - delta), packed into dsa.
    auto compute_ds = [&](int it) {
      const float* delta_s = smem_delta + (it % kStages) * kBlockM;
#pragma unroll
      for (int j = 0; j < kBlockM / 8; ++j) {
        const float2 d2 = *reinterpret_cast<const float2*>(delta_s + 8 * j + 2 * t);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          dp[4 * j + 2 * r + 0] = s[4 * j + 2 * r + 0] * (dp[4 * j + 2 * r + 0] - d2.x);
          dp[4 * j + 2 * r + 1] = s[4 * j + 2 * r + 1] * (dp[4 * j + 2 * r + 1] - d2.y);
        }
      }
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk) {
        dsa[kk][0] = BwdPack<kF16>(dp[8 * kk + 0], dp[8 * kk + 1]);
        dsa[kk][1] = BwdPack<kF16>(dp[8 * kk + 2], dp[8 * kk + 3]);
        dsa[kk][2] = BwdPack<kF16>(dp[8 * kk + 4], dp[8 * kk + 5]);
        dsa[kk][3] = BwdPack<kF16>(dp[8 * kk + 6], dp[8 * kk + 7]);
      }
    };
    // dK += dS^T Q (B = Q, MN-major).
    auto gemm_dk = [&](int it) {
      const uint32_t qb = q_base + (it % kStages) * Cfg::kQBytes;
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk) {
        const uint64_t dd = MakeDescSw128(qb + kk * 16 * 128, kBlockM * 128, 1024);
        Wgmma<kD, kF16>::RS(dk, dsa[kk], dd, 1);
      }
      WgmmaCommit();
    };
    auto release = [&](int it) {
      __syncwarp();
      if (lane == 0) MbarArrive(&q_empty[it % kStages]);
    };
    auto wait_full = [&](int it) { MbarWait(&q_full[it % kStages], (it / kStages) & 1); };

    MbarWait(kv_full, 0);
    if constexpr (!kOverlap) {
      for (int it = 0; it < m_count; ++it) {
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
      for (int it = 0; it < m_count - 1; ++it) {
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
      compute_p(m_count - 1);
      gemm_dv(m_count - 1);
      compute_ds(m_count - 1);
      gemm_dk(m_count - 1);
      WgmmaWait<0>();
      FenceRegs(dv);
      FenceRegs(dk);
      release(m_count - 1);
    }

    // ---------------------------- epilogue ----------------------------
    const float scale = p.scale;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = key0 + 8 * r;
      if (key >= p.kv_len) continue;
      if (p.group == 1) {
        const int64_t base = ((static_cast<int64_t>(b) * p.kv_len + key) * p.kv_heads + hk) * kD;
        uint16_t* gk = static_cast<uint16_t*>(p.dk) + base;
        uint16_t* gv = static_cast<uint16_t*>(p.dv) + base;
#pragma unroll
        for (int j = 0; j < kD / 8; ++j) {
          const int col = 8 * j + 2 * t;
          *reinterpret_cast<uint32_t*>(gk + col) =
              BwdPack<kF16>(dk[4 * j + 2 * r] * scale, dk[4 * j + 2 * r + 1] * scale);
          *reinterpret_cast<uint32_t*>(gv + col) = BwdPack<kF16>(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
        }
      } else {
        const int64_t base = ((static_cast<int64_t>(b) * p.kv_len + key) * p.heads + h) * kD;
        float* gk = p.dk_part + base;
        float* gv = p.dv_part + base;
#pragma unroll
        for (int j = 0; j < kD / 8; ++j) {
          const int col = 8 * j + 2 * t;
          *reinterpret_cast<float2*>(gk + col) =
              make_float2(dk[4 * j + 2 * r] * scale, dk[4 * j + 2 * r + 1] * scale);
          *reinterpret_cast<float2*>(gv + col) = make_float2(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
        }
      }
    }
  }
}

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
#pragma unroll
      for (int db = 0; db < kDBlocks; ++db) {
        TmaLoad4d(smem_q + db * kBlockM * 128, &tm_q, q_full, db * 64, h, m_block * kBlockM, b);
        TmaLoad4d(smem_do + db * kBlockM * 128, &tm_do, q_full, db * 64, h, m_block * kBlockM, b);
      }
      for (int it = 0; it < n_blocks; ++it) {
        const int st = it % kStages;
        const uint32_t ph = (it / kStages) & 1;
        MbarWait(&kv_empty[st], ph ^ 1);
        MbarArriveExpectTx(&kv_full[st], 2 * Cfg::kKVBytes);
#pragma unroll
        for (int db = 0; db < kDBlocks; ++db) {
          TmaLoad4d(smem_k + st * Cfg::kKVBytes + db * kBlockN * 128, &tm_k, &kv_full[st], db * 64, hk,
                    it * kBlockN, b);
          TmaLoad4d(smem_v + st * Cfg::kKVBytes + db * kBlockN * 128, &tm_v, &kv_full[st], db * 64, hk,
                    it * kBlockN, b);
        }
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
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        const uint64_t da = MakeDescSw128(q_base + (kk / 4) * kBlockM * 128 + (kk % 4) * 32, 16, 1024);
        const uint64_t db = MakeDescSw128(kb + (kk / 4) * kBlockN * 128 + (kk % 4) * 32, 16, 1024);
        Wgmma<kBlockN, kF16>::SS(s, da, db, kk > 0 ? 1 : 0);
      }
      WgmmaCommit();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        const uint64_t da = MakeDescSw128(do_base + (kk / 4) * kBlockM * 128 + (kk % 4) * 32, 16, 1024);
        const uint64_t db = MakeDescSw128(vb + (kk / 4) * kBlockN * 128 + (kk % 4) * 32, 16, 1024);
        Wgmma<kBlockN, kF16>::SS(dp, da, db, kk > 0 ? 1 : 0);
      }
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
          dsa[kk][q] = BwdPack<kF16>(s[i0] * (dp[i0] - dl[r]), s[i0 + 1] * (dp[i0 + 1] - dl[r]));
        }
      }
    };
    // dQ += dS K (B = K, MN-major).
    auto gemm_dq = [&](int it) {
      const uint32_t kb = k_base + (it % kStages) * Cfg::kKVBytes;
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        const uint64_t dd = MakeDescSw128(kb + kk * 16 * 128, kBlockN * 128, 1024);
        Wgmma<kD, kF16>::RS(dq, dsa[kk], dd, 1);
      }
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
            BwdPack<kF16>(dq[4 * j + 2 * r] * scale, dq[4 * j + 2 * r + 1] * scale);
      }
    }
  }
}

}  // namespace jaxdnn::attention::sm90
