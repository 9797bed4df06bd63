// The two tensor-core steps of one warp's 16 query rows in the mma.sync
// attention forwards (the prefill kernel and the split-KV decode kernel):
// S = Q K^T over a block of keys, and O += P V with P taken straight from the
// S accumulators. Q, K and V sit in shared memory as sm80::SwizzledTile<kD>.
#pragma once

#include <cstdint>

#include "common/sm80/mma.cuh"

namespace jaxdnn::attention {

// sc = Q[q_row0 .. q_row0 + 16) K[0 .. kKeys)^T; tK points at the block's first key.
template <typename T, int kD, int kKeys>
__device__ __forceinline__ void WarpScores(float (&sc)[kKeys / 8][4], const T* sQ, int q_row0, const T* tK,
                                           int lane) {
  using Swz = sm80::SwizzledTile<kD>;
  for (int i = 0; i < kKeys / 8; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    // All of this k-step's fragments first, then its MMAs: the loads overlap.
    uint32_t a[4], bk[kKeys / 16][4];
    sm80::LdMatrixX4(a, sQ + Swz::Offset(q_row0 + (lane % 16), kk * 2 + lane / 16));
#pragma unroll
    for (int nb = 0; nb < kKeys / 16; ++nb) {
      sm80::LdMatrixX4(bk[nb],
                       tK + Swz::Offset(nb * 16 + (lane / 16) * 8 + (lane % 8), kk * 2 + (lane / 8) % 2));
    }
#pragma unroll
    for (int nb = 0; nb < kKeys / 16; ++nb) {
      sm80::MmaOp<T>::Run(sc[2 * nb], a, bk[nb][0], bk[nb][1]);
      sm80::MmaOp<T>::Run(sc[2 * nb + 1], a, bk[nb][2], bk[nb][3]);
    }
  }
}

// o += P V[0 .. kKeys): the S accumulators of two n8 blocks are the A operand
// of one k16 step; tV points at the block's first key.
template <typename T, int kD, int kKeys>
__device__ __forceinline__ void WarpAccumulatePV(float (&o)[kD / 8][4], const float (&p)[kKeys / 8][4],
                                                 const T* tV, int lane) {
  using Swz = sm80::SwizzledTile<kD>;
#pragma unroll
  for (int kt = 0; kt < kKeys / 16; ++kt) {
    uint32_t a[4];
    a[0] = sm80::Pack2<T>(p[2 * kt][0], p[2 * kt][1]);
    a[1] = sm80::Pack2<T>(p[2 * kt][2], p[2 * kt][3]);
    a[2] = sm80::Pack2<T>(p[2 * kt + 1][0], p[2 * kt + 1][1]);
    a[3] = sm80::Pack2<T>(p[2 * kt + 1][2], p[2 * kt + 1][3]);
    constexpr int kGroup = 4;  // V fragments loaded ahead of their MMAs
#pragma unroll
    for (int db0 = 0; db0 < kD / 16; db0 += kGroup) {
      uint32_t bv[kGroup][4];
#pragma unroll
      for (int g4 = 0; g4 < kGroup; ++g4) {
        sm80::LdMatrixX4Trans(bv[g4], tV + Swz::Offset(kt * 16 + ((lane / 8) % 2) * 8 + (lane % 8),
                                                       (db0 + g4) * 2 + lane / 16));
      }
#pragma unroll
      for (int g4 = 0; g4 < kGroup; ++g4) {
        sm80::MmaOp<T>::Run(o[2 * (db0 + g4)], a, bv[g4][0], bv[g4][1]);
        sm80::MmaOp<T>::Run(o[2 * (db0 + g4) + 1], a, bv[g4][2], bv[g4][3]);
      }
    }
  }
}

}  // namespace jaxdnn::attention
