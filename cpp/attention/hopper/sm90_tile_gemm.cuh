// Tile products of the sm90 attention kernels, issued by one warpgroup
// between the caller's WgmmaFence() and WgmmaCommit(). Tiles sit in shared
// memory in 128-byte-swizzled 64-column panels (see MakeDescSw128).
#pragma once

#include <cstdint>

#include "attention/hopper/sm90_ptx.cuh"

namespace jaxdnn::attention::sm90 {

// acc (64 x kN) = A (64 rows of a kRowsA-row tile) . B^T (kN = kRowsB rows),
// contracting over the head dim kD; both tiles K-major (head dim contiguous):
// S = Q K^T, dP = dO V^T and their transposes. `accumulate` 0 overwrites acc.
template <int kN, int kD, bool kF16, int kRowsA, int kRowsB>
__device__ __forceinline__ void TileGemmKMajor(float (&acc)[kN / 2], uint32_t a_base,
                                               uint32_t b_base) {
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint64_t da = MakeDescSw128(a_base + (kk / 4) * kRowsA * 128 + (kk % 4) * 32, 16, 1024);
    const uint64_t db = MakeDescSw128(b_base + (kk / 4) * kRowsB * 128 + (kk % 4) * 32, 16, 1024);
    Wgmma<kN, kF16>::SS(acc, da, db, kk > 0 ? 1 : 0);
  }
}

// acc (64 x kD) += A (64 x kK, 16-bit fragments in registers) . B, with B a
// kK-row tile whose head dim (N) is contiguous (MN-major): P V, P^T dO,
// dS^T Q, dS K.
template <int kD, int kK, bool kF16>
__device__ __forceinline__ void TileGemmRegsA(float (&acc)[kD / 2], const uint32_t (&a)[kK / 16][4],
                                              uint32_t b_base) {
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    const uint64_t db = MakeDescSw128(b_base + kk * 16 * 128, kK * 128, 1024);
    Wgmma<kD, kF16>::RS(acc, a[kk], db, 1);
  }
}

}  // namespace jaxdnn::attention::sm90
