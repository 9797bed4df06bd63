// Tile products of the sm90 attention kernels, issued by one warpgroup
// between the caller's WgmmaFence() and WgmmaCommit(). Tiles sit in shared
// memory in 128-byte-swizzled 64-column panels (see MakeDescSw128).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/sm90/ptx.cuh"

namespace jaxdnn::sm90 {

// Two floats rounded to one 32-bit register of 16-bit values (f16 or bf16).
template <bool kF16>
__device__ __forceinline__ uint32_t PackPair(float lo, float hi) {
  if constexpr (kF16) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// A wgmma accumulator (64 x kK floats per warpgroup) rounded to the 16-bit A
// fragments of TileGemmRegsA: the accumulator layout is the fragment layout.
template <bool kF16, int kK>
__device__ __forceinline__ void PackFragments(const float (&v)[kK / 2], uint32_t (&a)[kK / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    a[kk][0] = PackPair<kF16>(v[8 * kk + 0], v[8 * kk + 1]);
    a[kk][1] = PackPair<kF16>(v[8 * kk + 2], v[8 * kk + 3]);
    a[kk][2] = PackPair<kF16>(v[8 * kk + 4], v[8 * kk + 5]);
    a[kk][3] = PackPair<kF16>(v[8 * kk + 6], v[8 * kk + 7]);
  }
}

// acc (64 x kN) = A (64 rows of a kRowsA-row tile) . B^T (kN = kRowsB rows),
// contracting over the head dim kD; both tiles K-major (head dim contiguous):
// S = Q K^T, dP = dO V^T and their transposes. `accumulate` 0 overwrites acc.
template <int kN, int kD, bool kF16, int kRowsA, int kRowsB>
__device__ __forceinline__ void TileGemmKMajor(float (&acc)[kN / 2], uint32_t a_base, uint32_t b_base) {
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint64_t da = MakeDescSw128(a_base + (kk / 4) * kRowsA * 128 + (kk % 4) * 32, 16, 1024);
    const uint64_t db = MakeDescSw128(b_base + (kk / 4) * kRowsB * 128 + (kk % 4) * 32, 16, 1024);
    Wgmma<kN, kF16>::SS(acc, da, db, kk > 0 ? 1 : 0);
  }
}

// One warpgroup's 64-row K-major tile (128-byte-swizzled 64-column panels
// kRowsA rows apart, as TileGemmKMajor reads it) loaded as the 16-bit A
// fragments of kD / 16 k-steps: warp w holds rows 16w..16w+15.
template <int kD, int kRowsA>
__device__ __forceinline__ void LoadFragmentsKMajor(uint32_t (&a)[kD / 16][4], uint32_t a_base, int warp,
                                                    int lane) {
  const int row = warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const int chunk = (kk % 4) * 2 + lane / 16;
    LdMatrixX4(a[kk], a_base + (kk / 4) * kRowsA * 128 + row * 128 + ((chunk ^ (row % 8)) * 16));
  }
}

// acc (64 x 128) = A (fragments from LoadFragmentsKMajor) . B^T, B a
// 128-row K-major tile (kRowsB rows per panel): S = Q K^T with Q in registers.
template <int kD, bool kF16, int kRowsB>
__device__ __forceinline__ void TileGemmRegsAKMajor(float (&acc)[64], const uint32_t (&a)[kD / 16][4],
                                                    uint32_t b_base) {
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint64_t db = MakeDescSw128(b_base + (kk / 4) * kRowsB * 128 + (kk % 4) * 32, 16, 1024);
    WgmmaRSKm128<kF16>(acc, a[kk], db, kk > 0 ? 1 : 0);
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

// acc (64 x kN) += A (64 x 64, one K-major 128-byte-swizzled panel in shared
// memory: 64 rows of 64 16-bit elements) . B (64 rows, head dim (N)
// contiguous, MN-major, 64-column panels kPanelBytes apart): the head dim 256
// backward's dV += P^T dO and dK += dS^T Q with P^T, dS^T in shared memory.
template <int kN, bool kF16, int kPanelBytes>
__device__ __forceinline__ void TileGemmSmemA64(float (&acc)[kN / 2], uint32_t a_base, uint32_t b_base) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t da = MakeDescSw128(a_base + kk * 32, 16, 1024);
    const uint64_t db = MakeDescSw128(b_base + kk * 16 * 128, kPanelBytes, 1024);
    WgmmaBt<kN, kF16>::SS(acc, da, db, 1);
  }
}

}  // namespace jaxdnn::sm90
