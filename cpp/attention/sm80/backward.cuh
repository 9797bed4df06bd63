// CUDA attention backward: recomputes the probabilities from the saved
// log-sum-exp, in three deterministic passes (no atomics, so every run gives
// bit-identical gradients whatever `deterministic` says):
//
//   delta:  delta_i = rowsum(dO_i * O_i) - dlse_i                 (a warp per row)
//   dQ:     per 64 query rows: S = Q K^T, dP = dO V^T, dS, dQ += dS K;
//           the same pass writes dbias, which it visits once per (i, j)
//   dK/dV:  per 64 keys: S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q,
//           one partial per query head, summed over each GQA group in a fixed
//           order by the reduce kernel that also casts to the output dtype.
// Tiles are mma.sync m16n8k16 with fragments laid out as in the forward.
#pragma once

#include "attention/sm80/forward.cuh"
#include "common/sm80/min_nan.cuh"

namespace jaxdnn::attention {

constexpr int kBwdThreads = 128;
constexpr int kDqBlockM = 64;  // query rows per dQ block (16 per warp)
constexpr int kKvBlockN = 64;  // keys per dK/dV block (16 per warp)
constexpr int kKvBlockQ = 32;  // query rows per step of the dK/dV loop

template <int kD>
constexpr int DqBlockN() {
  return kD <= 128 ? 32 : 16;
}

template <int kD>
constexpr int DqSmemBytes() {
  return (2 * kDqBlockM * kD + 4 * DqBlockN<kD>() * kD) * 2;
}

template <int kD>
constexpr int KvSmemBytes() {
  return (2 * kKvBlockN * kD + 4 * kKvBlockQ * kD) * 2;
}

// Workspace carve-up (float32), shared with the host side.
struct BwdWorkspace {
  float* delta;       // [batch, heads, q_len]
  float* dk_part;     // [batch, kv_len, heads, D]
  float* dv_part;     // [batch, kv_len, heads, D]
  float* dbias_full;  // [batch, heads, q_len, kv_len] when the bias broadcasts; else null
};

// ---------------------------------------------------------------- delta ----
template <typename T>
__global__ void AttentionDeltaKernel(const AttnBwdArgs p, float* delta) {
  const AttnShape& s = p.shape;
  const int64_t rows = s.batch * s.q_len * s.heads;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const T* o = static_cast<const T*>(p.out) + row * s.head_dim;
  const T* d = static_cast<const T*>(p.dout) + row * s.head_dim;
  float acc = 0.f;
  for (int c = lane * 8; c < s.head_dim; c += 256) {
    const uint4 ov = *reinterpret_cast<const uint4*>(o + c);
    const uint4 dv = *reinterpret_cast<const uint4*>(d + c);
    const T* oe = reinterpret_cast<const T*>(&ov);
    const T* de = reinterpret_cast<const T*>(&dv);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc += float(oe[e]) * float(de[e]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    // row = (b * q_len + i) * heads + h  ->  delta[b, h, i]
    const int64_t h = row % s.heads, bi = row / s.heads;
    const int64_t b = bi / s.q_len, i = bi % s.q_len;
    const int64_t at = (b * s.heads + h) * s.q_len + i;
    delta[at] = acc - (p.dlse ? p.dlse[at] : 0.f);
  }
}

// ------------------------------------------------------------------- dQ ----
template <typename T, int kD>
__global__ void __launch_bounds__(kBwdThreads) AttentionDqKernel(const AttnBwdArgs p, BwdWorkspace ws) {
  constexpr int kBlockN = DqBlockN<kD>();
  constexpr int kNTiles = kBlockN / 8;
  constexpr int kDTiles = kD / 8;
  using Swz = sm80::SwizzledTile<kD>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sdO = sQ + kDqBlockM * kD;
  T* sK = sdO + kDqBlockM * kD;   // [2][kBlockN][kD]
  T* sV = sK + 2 * kBlockN * kD;  // [2][kBlockN][kD]

  const AttnShape& s = p.shape;
  const AttnMaskParams& m = p.mask_params;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kDqBlockM;
  const int kvh = h / int(s.group());
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, quad = lane % 4;
  const int64_t q_stride = s.heads * kD, kv_stride = s.kv_heads * kD;

  const int q_valid = int(ClampLength(m.q_lengths, b, s.q_len));
  const int last_row = min(q0 + kDqBlockM, q_valid) - 1;
  int band_lo = 0, band_hi = 0;
  if (last_row >= q0) {
    band_lo = int(AllowedKeys(m, s, b, q0).lo);
    band_hi = int(AllowedKeys(m, s, b, last_row).hi);
  }
  const int tile_lo = band_lo / kBlockN;
  const int tile_hi = band_hi > band_lo ? (band_hi + kBlockN - 1) / kBlockN : tile_lo;

  int row[2], lo[2], hi[2];
  float lse[2], delta[2];
  uint32_t drop_state[2] = {0, 0};
  const bool dropout = m.seeds != nullptr && m.dropout_rate > 0.f;
  for (int r = 0; r < 2; ++r) {
    row[r] = q0 + warp * 16 + g + 8 * r;
    const KeyRange kr = AllowedKeys(m, s, b, row[r]);
    lo[r] = int(kr.lo);
    hi[r] = int(kr.hi);
    const bool in = row[r] < s.q_len;
    const int64_t at = (int64_t(b) * s.heads + h) * s.q_len + row[r];
    lse[r] = in ? p.lse[at] : INFINITY;
    if (lse[r] == -INFINITY) lse[r] = INFINITY;  // a row with no key: every p is 0
    delta[r] = in ? ws.delta[at] : 0.f;
    if (dropout) drop_state[r] = DropoutRowState(m.seeds + 2 * b, uint32_t(h), uint32_t(row[r]));
  }
  const uint32_t drop_threshold = dropout ? DropoutThreshold(m.dropout_rate) : 0u;
  const float keep_scale = dropout ? 1.f / (1.f - m.dropout_rate) : 1.f;
  const bool elementwise = m.q_segments != nullptr || p.mask.data != nullptr || p.bias.data != nullptr;
  __shared__ int seg_range[4];
  int seg_min = 0, seg_max = 0;
  if (m.q_segments != nullptr && last_row >= q0) {
    SegmentRange(m.q_segments + int64_t(b) * s.q_len, q0, last_row, seg_range, seg_min, seg_max);
  }
  float* dbias = p.dbias == nullptr ? nullptr : (ws.dbias_full ? ws.dbias_full : p.dbias);
  // dbias is written at [b, h, i, j] of a full-size buffer (strides of the full shape).
  const int64_t db_row = s.kv_len, db_head = s.q_len * s.kv_len, db_batch = s.heads * db_head;

  const T* q_src = static_cast<const T*>(p.q) + (int64_t(b) * s.q_len + q0) * q_stride + int64_t(h) * kD;
  const T* do_src = static_cast<const T*>(p.dout) + (int64_t(b) * s.q_len + q0) * q_stride + int64_t(h) * kD;
  const T* k_src = static_cast<const T*>(p.k) + int64_t(b) * s.kv_len * kv_stride + int64_t(kvh) * kD;
  const T* v_src = static_cast<const T*>(p.v) + int64_t(b) * s.kv_len * kv_stride + int64_t(kvh) * kD;

  float dq[kDTiles][4];
  for (int i = 0; i < kDTiles; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;

  if (tile_hi > tile_lo) {
    LoadTile<T, kD, kDqBlockM>(sQ, q_src, q_stride, int(s.q_len) - q0);
    LoadTile<T, kD, kDqBlockM>(sdO, do_src, q_stride, int(s.q_len) - q0);
    LoadTilePair<T, kD, kBlockN>(sK, sV, k_src, v_src, kv_stride, tile_lo * kBlockN, int(s.kv_len));
    sm80::CpAsyncCommit();
  }
  for (int t = tile_lo; t < tile_hi; ++t) {
    const int buf = (t - tile_lo) & 1;
    const int n0 = t * kBlockN;
    if (t + 1 < tile_hi) {
      LoadTilePair<T, kD, kBlockN>(sK + (buf ^ 1) * kBlockN * kD, sV + (buf ^ 1) * kBlockN * kD, k_src, v_src,
                                   kv_stride, n0 + kBlockN, int(s.kv_len));
    }
    sm80::CpAsyncCommit();
    sm80::CpAsyncWait<1>();
    __syncthreads();
    bool tile_elementwise = elementwise;
    // A skipped tile leaves its dS (and dbias, zeroed beforehand) at zero.
    if (m.q_segments != nullptr &&
        !ApplySegmentVote<kBlockN>(p, m.kv_segments + int64_t(b) * s.kv_len, n0, int(s.kv_len), seg_min,
                                   seg_max, tile_elementwise)) {
      __syncthreads();
      continue;
    }
    const T* tK = sK + buf * kBlockN * kD;
    const T* tV = sV + buf * kBlockN * kD;

    // S = Q K^T and dP = dO V^T.
    float sc[kNTiles][4], dp[kNTiles][4];
    for (int i = 0; i < kNTiles; ++i) {
      sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
      dp[i][0] = dp[i][1] = dp[i][2] = dp[i][3] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t a[4], ad[4], bk[kBlockN / 16][4], bv[kBlockN / 16][4];
      sm80::LdMatrixX4(a, sQ + Swz::Offset(warp * 16 + (lane % 16), kk * 2 + lane / 16));
      sm80::LdMatrixX4(ad, sdO + Swz::Offset(warp * 16 + (lane % 16), kk * 2 + lane / 16));
#pragma unroll
      for (int nb = 0; nb < kBlockN / 16; ++nb) {
        const int r = nb * 16 + (lane / 16) * 8 + (lane % 8), c = kk * 2 + (lane / 8) % 2;
        sm80::LdMatrixX4(bk[nb], tK + Swz::Offset(r, c));
        sm80::LdMatrixX4(bv[nb], tV + Swz::Offset(r, c));
      }
#pragma unroll
      for (int nb = 0; nb < kBlockN / 16; ++nb) {
        sm80::MmaOp<T>::Run(sc[2 * nb], a, bk[nb][0], bk[nb][1]);
        sm80::MmaOp<T>::Run(sc[2 * nb + 1], a, bk[nb][2], bk[nb][3]);
        sm80::MmaOp<T>::Run(dp[2 * nb], ad, bv[nb][0], bv[nb][1]);
        sm80::MmaOp<T>::Run(dp[2 * nb + 1], ad, bv[nb][2], bv[nb][3]);
      }
    }

    // dS = P * (dP * keep - delta) * dLogit/dS; dbias takes dS before the logit chain rule.
#pragma unroll
    for (int nb = 0; nb < kNTiles; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const int j = n0 + nb * 8 + 2 * quad + (e & 1);
        bool keep = (j >= lo[r]) & (j < hi[r]);
        if (tile_elementwise && keep) {
          keep = SameSegment(m, s, b, row[r], j) &&
                 (p.mask.data == nullptr ||
                  static_cast<const uint8_t*>(p.mask.data)[p.mask.Offset(b, h, row[r], j)]);
        }
        const float raw = Logit(m, sc[nb][e]);
        float x = raw;
        if (tile_elementwise && keep && p.bias.data != nullptr) x += LoadBias(p, b, h, row[r], j);
        const float pr = keep ? MinNaN(__expf(x - lse[r]), 1.f) : 0.f;  // P <= 1: sm90/backward_scores.cuh
        float kd = 1.f;
        if (dropout) kd = DropoutKeep(drop_state[r], uint32_t(j), drop_threshold) ? keep_scale : 0.f;
        const float dlogit = pr * (dp[nb][e] * kd - delta[r]);
        if (dbias != nullptr && row[r] < s.q_len && j < s.kv_len) {
          dbias[b * db_batch + h * db_head + int64_t(row[r]) * db_row + j] = dlogit;
        }
        sc[nb][e] = keep ? dlogit * LogitGrad(m, raw) : 0.f;
      }
    }

    // dQ += dS K (K as the k16 x n8 operand: transposed fragments, as V in the forward).
#pragma unroll
    for (int kt = 0; kt < kBlockN / 16; ++kt) {
      uint32_t a[4];
      a[0] = sm80::Pack2<T>(sc[2 * kt][0], sc[2 * kt][1]);
      a[1] = sm80::Pack2<T>(sc[2 * kt][2], sc[2 * kt][3]);
      a[2] = sm80::Pack2<T>(sc[2 * kt + 1][0], sc[2 * kt + 1][1]);
      a[3] = sm80::Pack2<T>(sc[2 * kt + 1][2], sc[2 * kt + 1][3]);
      constexpr int kGroup = 4;
#pragma unroll
      for (int db0 = 0; db0 < kD / 16; db0 += kGroup) {
        uint32_t bk[kGroup][4];
#pragma unroll
        for (int g4 = 0; g4 < kGroup; ++g4) {
          sm80::LdMatrixX4Trans(bk[g4], tK + Swz::Offset(kt * 16 + ((lane / 8) % 2) * 8 + (lane % 8),
                                                         (db0 + g4) * 2 + lane / 16));
        }
#pragma unroll
        for (int g4 = 0; g4 < kGroup; ++g4) {
          sm80::MmaOp<T>::Run(dq[2 * (db0 + g4)], a, bk[g4][0], bk[g4][1]);
          sm80::MmaOp<T>::Run(dq[2 * (db0 + g4) + 1], a, bk[g4][2], bk[g4][3]);
        }
      }
    }
    __syncthreads();
  }
  sm80::CpAsyncWait<0>();

  // Rows past the band (or fully masked) still get their zero gradient.
  T* out = static_cast<T*>(p.dq);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= s.q_len) continue;
    T* dst = out + (int64_t(b) * s.q_len + row[r]) * q_stride + int64_t(h) * kD;
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
      *reinterpret_cast<uint32_t*>(dst + i * 8 + 2 * quad) = sm80::Pack2<T>(dq[i][2 * r], dq[i][2 * r + 1]);
    }
  }
}

// ---------------------------------------------------------------- dK/dV ----
// kDoDk / kDoDv: head dim 256 runs the two halves as separate launches, so
// that one thread's accumulators fit in registers.
template <typename T, int kD, bool kDoDk, bool kDoDv>
__global__ void __launch_bounds__(kBwdThreads) AttentionDkDvKernel(const AttnBwdArgs p, BwdWorkspace ws) {
  constexpr int kQTiles = kKvBlockQ / 8;  // n8 blocks of S^T (queries)
  constexpr int kDTiles = kD / 8;
  using Swz = sm80::SwizzledTile<kD>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sK = reinterpret_cast<T*>(smem);
  T* sV = sK + kKvBlockN * kD;
  T* sQ = sV + kKvBlockN * kD;       // [2][kKvBlockQ][kD]
  T* sdO = sQ + 2 * kKvBlockQ * kD;  // [2][kKvBlockQ][kD]
  __shared__ float s_lse[2][kKvBlockQ], s_delta[2][kKvBlockQ];
  __shared__ int s_lo[2][kKvBlockQ], s_hi[2][kKvBlockQ];
  __shared__ uint32_t s_drop[2][kKvBlockQ];

  const AttnShape& s = p.shape;
  const AttnMaskParams& m = p.mask_params;
  const int b = blockIdx.z, h = blockIdx.y, n0 = blockIdx.x * kKvBlockN;
  const int kvh = h / int(s.group());
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, quad = lane % 4;
  const int64_t q_stride = s.heads * kD, kv_stride = s.kv_heads * kD;
  const bool dropout = m.seeds != nullptr && m.dropout_rate > 0.f;
  const uint32_t drop_threshold = dropout ? DropoutThreshold(m.dropout_rate) : 0u;
  const float keep_scale = dropout ? 1.f / (1.f - m.dropout_rate) : 1.f;
  const bool elementwise = m.q_segments != nullptr || p.mask.data != nullptr || p.bias.data != nullptr;
  const int n_end = n0 + kKvBlockN;
  __shared__ int seg_range[4];
  int kv_seg_min = 0, kv_seg_max = 0;
  const int kv_last = min(n_end, int(s.kv_len)) - 1;
  if (m.q_segments != nullptr && kv_last >= n0) {
    SegmentRange(m.kv_segments + int64_t(b) * s.kv_len, n0, kv_last, seg_range, kv_seg_min, kv_seg_max);
  }

  // Query tiles whose band reaches these keys (lo and hi grow with the row).
  const int q_valid = int(ClampLength(m.q_lengths, b, s.q_len));
  const int n_qtiles = (q_valid + kKvBlockQ - 1) / kKvBlockQ;
  auto tile_hits = [&](int qt) {
    const int first = qt * kKvBlockQ, last = min(first + kKvBlockQ, q_valid) - 1;
    return int(AllowedKeys(m, s, b, first).lo)<n_end&& int(AllowedKeys(m, s, b, last).hi)> n0;
  };
  int qt_lo = 0;  // the tiles that hit form one run: lo and hi both grow
  while (qt_lo < n_qtiles && !tile_hits(qt_lo)) ++qt_lo;
  int qt_hi = n_qtiles;
  while (qt_hi > qt_lo && !tile_hits(qt_hi - 1)) --qt_hi;

  const T* q_src = static_cast<const T*>(p.q) + int64_t(b) * s.q_len * q_stride + int64_t(h) * kD;
  const T* do_src = static_cast<const T*>(p.dout) + int64_t(b) * s.q_len * q_stride + int64_t(h) * kD;
  const T* k_src = static_cast<const T*>(p.k) + (int64_t(b) * s.kv_len + n0) * kv_stride + int64_t(kvh) * kD;
  const T* v_src = static_cast<const T*>(p.v) + (int64_t(b) * s.kv_len + n0) * kv_stride + int64_t(kvh) * kD;

  float dk[kDoDk ? kDTiles : 1][4], dv[kDoDv ? kDTiles : 1][4];
  for (int i = 0; i < (kDoDk ? kDTiles : 1); ++i) dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.f;
  for (int i = 0; i < (kDoDv ? kDTiles : 1); ++i) dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.f;

  // Per query row of a tile: its key range, lse, delta and dropout state.
  auto stage_rows = [&](int qt, int buf) {
    for (int r = threadIdx.x; r < kKvBlockQ; r += kBwdThreads) {
      const int i = qt * kKvBlockQ + r;
      const KeyRange kr = AllowedKeys(m, s, b, i);
      s_lo[buf][r] = int(kr.lo);
      s_hi[buf][r] = int(kr.hi);
      const bool in = i < s.q_len;
      const int64_t at = (int64_t(b) * s.heads + h) * s.q_len + i;
      float l = in ? p.lse[at] : INFINITY;
      s_lse[buf][r] = l == -INFINITY ? INFINITY : l;
      s_delta[buf][r] = in ? ws.delta[at] : 0.f;
      s_drop[buf][r] = dropout ? DropoutRowState(m.seeds + 2 * b, uint32_t(h), uint32_t(i)) : 0u;
    }
  };

  if (qt_hi > qt_lo) {
    LoadTile<T, kD, kKvBlockN>(sK, k_src, kv_stride, int(s.kv_len) - n0);
    LoadTile<T, kD, kKvBlockN>(sV, v_src, kv_stride, int(s.kv_len) - n0);
    LoadTilePair<T, kD, kKvBlockQ>(sQ, sdO, q_src, do_src, q_stride, qt_lo * kKvBlockQ, int(s.q_len));
    stage_rows(qt_lo, 0);
    sm80::CpAsyncCommit();
  }
  for (int qt = qt_lo; qt < qt_hi; ++qt) {
    const int buf = (qt - qt_lo) & 1;
    const int i0 = qt * kKvBlockQ;
    if (qt + 1 < qt_hi) {
      LoadTilePair<T, kD, kKvBlockQ>(sQ + (buf ^ 1) * kKvBlockQ * kD, sdO + (buf ^ 1) * kKvBlockQ * kD, q_src,
                                     do_src, q_stride, i0 + kKvBlockQ, int(s.q_len));
      stage_rows(qt + 1, buf ^ 1);
    }
    sm80::CpAsyncCommit();
    sm80::CpAsyncWait<1>();
    __syncthreads();
    bool tile_elementwise = elementwise;
    if (m.q_segments != nullptr &&
        !ApplySegmentVote<kKvBlockQ>(p, m.q_segments + int64_t(b) * s.q_len, i0, int(s.q_len), kv_seg_min,
                                     kv_seg_max, tile_elementwise)) {
      __syncthreads();
      continue;
    }
    const T* tQ = sQ + buf * kKvBlockQ * kD;
    const T* tdO = sdO + buf * kKvBlockQ * kD;

    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys.
    float st[kQTiles][4], dpt[kQTiles][4];
    for (int i = 0; i < kQTiles; ++i) {
      st[i][0] = st[i][1] = st[i][2] = st[i][3] = 0.f;
      dpt[i][0] = dpt[i][1] = dpt[i][2] = dpt[i][3] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t ak[4], av[4], bq[kKvBlockQ / 16][4], bo[kKvBlockQ / 16][4];
      sm80::LdMatrixX4(ak, sK + Swz::Offset(warp * 16 + (lane % 16), kk * 2 + lane / 16));
      sm80::LdMatrixX4(av, sV + Swz::Offset(warp * 16 + (lane % 16), kk * 2 + lane / 16));
#pragma unroll
      for (int nb = 0; nb < kKvBlockQ / 16; ++nb) {
        const int r = nb * 16 + (lane / 16) * 8 + (lane % 8), c = kk * 2 + (lane / 8) % 2;
        sm80::LdMatrixX4(bq[nb], tQ + Swz::Offset(r, c));
        sm80::LdMatrixX4(bo[nb], tdO + Swz::Offset(r, c));
      }
#pragma unroll
      for (int nb = 0; nb < kKvBlockQ / 16; ++nb) {
        sm80::MmaOp<T>::Run(st[2 * nb], ak, bq[nb][0], bq[nb][1]);
        sm80::MmaOp<T>::Run(st[2 * nb + 1], ak, bq[nb][2], bq[nb][3]);
        sm80::MmaOp<T>::Run(dpt[2 * nb], av, bo[nb][0], bo[nb][1]);
        sm80::MmaOp<T>::Run(dpt[2 * nb + 1], av, bo[nb][2], bo[nb][3]);
      }
    }

    // Element (key j = row, query i = column): P^T (dropped) into st, dS^T into dpt.
#pragma unroll
    for (int nb = 0; nb < kQTiles; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = n0 + warp * 16 + g + 8 * (e / 2);
        const int c = nb * 8 + 2 * quad + (e & 1);
        const int i = i0 + c;
        bool keep = (j >= s_lo[buf][c]) & (j < s_hi[buf][c]);
        if (tile_elementwise && keep) {
          keep =
              SameSegment(m, s, b, i, j) &&
              (p.mask.data == nullptr || static_cast<const uint8_t*>(p.mask.data)[p.mask.Offset(b, h, i, j)]);
        }
        const float raw = Logit(m, st[nb][e]);
        float x = raw;
        if (tile_elementwise && keep && p.bias.data != nullptr) x += LoadBias(p, b, h, i, j);
        const float pr = keep ? MinNaN(__expf(x - s_lse[buf][c]), 1.f) : 0.f;
        float kd = 1.f;
        if (dropout) kd = DropoutKeep(s_drop[buf][c], uint32_t(j), drop_threshold) ? keep_scale : 0.f;
        const float dlogit = pr * (dpt[nb][e] * kd - s_delta[buf][c]);
        dpt[nb][e] = keep ? dlogit * LogitGrad(m, raw) : 0.f;
        st[nb][e] = pr * kd;
      }
    }

    // dV += P^T dO and dK += dS^T Q (queries are the k dimension: transposed B fragments).
#pragma unroll
    for (int kt = 0; kt < kKvBlockQ / 16; ++kt) {
      uint32_t ap[4], as[4];
      ap[0] = sm80::Pack2<T>(st[2 * kt][0], st[2 * kt][1]);
      ap[1] = sm80::Pack2<T>(st[2 * kt][2], st[2 * kt][3]);
      ap[2] = sm80::Pack2<T>(st[2 * kt + 1][0], st[2 * kt + 1][1]);
      ap[3] = sm80::Pack2<T>(st[2 * kt + 1][2], st[2 * kt + 1][3]);
      as[0] = sm80::Pack2<T>(dpt[2 * kt][0], dpt[2 * kt][1]);
      as[1] = sm80::Pack2<T>(dpt[2 * kt][2], dpt[2 * kt][3]);
      as[2] = sm80::Pack2<T>(dpt[2 * kt + 1][0], dpt[2 * kt + 1][1]);
      as[3] = sm80::Pack2<T>(dpt[2 * kt + 1][2], dpt[2 * kt + 1][3]);
#pragma unroll
      for (int db = 0; db < kD / 16; ++db) {
        const int r = kt * 16 + ((lane / 8) % 2) * 8 + (lane % 8), c = db * 2 + lane / 16;
        if constexpr (kDoDv) {
          uint32_t bo[4];
          sm80::LdMatrixX4Trans(bo, tdO + Swz::Offset(r, c));
          sm80::MmaOp<T>::Run(dv[2 * db], ap, bo[0], bo[1]);
          sm80::MmaOp<T>::Run(dv[2 * db + 1], ap, bo[2], bo[3]);
        }
        if constexpr (kDoDk) {
          uint32_t bq[4];
          sm80::LdMatrixX4Trans(bq, tQ + Swz::Offset(r, c));
          sm80::MmaOp<T>::Run(dk[2 * db], as, bq[0], bq[1]);
          sm80::MmaOp<T>::Run(dk[2 * db + 1], as, bq[2], bq[3]);
        }
      }
    }
    __syncthreads();
  }
  sm80::CpAsyncWait<0>();

  // Partials per query head, float32 [batch, kv_len, heads, D]; zeros where no query reached.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = n0 + warp * 16 + g + 8 * r;
    if (j >= s.kv_len) continue;
    const int64_t base = ((int64_t(b) * s.kv_len + j) * s.heads + h) * kD;
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
      if constexpr (kDoDk) {
        *reinterpret_cast<float2*>(ws.dk_part + base + i * 8 + 2 * quad) =
            make_float2(dk[i][2 * r], dk[i][2 * r + 1]);
      }
      if constexpr (kDoDv) {
        *reinterpret_cast<float2*>(ws.dv_part + base + i * 8 + 2 * quad) =
            make_float2(dv[i][2 * r], dv[i][2 * r + 1]);
      }
    }
  }
}

// ------------------------------------------------------------- reductions ----
// dk/dv[b, j, kvh, d] = sum over the group's query heads, in head order.
template <typename T>
__global__ void AttentionGroupSumKernel(const float* part, T* out, AttnShape s) {
  const int64_t n = s.batch * s.kv_len * s.kv_heads * s.head_dim;
  const int64_t group = s.group();
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = idx % s.head_dim, rest = idx / s.head_dim;
    const int64_t kvh = rest % s.kv_heads, bj = rest / s.kv_heads;
    const float* src = part + (bj * s.heads + kvh * group) * s.head_dim + d;
    float acc = 0.f;
    for (int64_t gg = 0; gg < group; ++gg) acc += src[gg * s.head_dim];
    out[idx] = T(acc);
  }
}

}  // namespace jaxdnn::attention
