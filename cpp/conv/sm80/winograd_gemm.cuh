// The batched GEMMs of the CUDA Winograd forward (winograd_fwd.h):
// C[b] = A[b] B[b] for b = blockIdx.z, A [m][k] and B [k][n] row-major,
// C [m][n] float32. The transforms pad m to 128 rows, k to 32 and n to 64
// with zeros, so neither kernel checks a bound.
#pragma once

#include <cstdint>

#include "common/sm80/mma.cuh"

namespace jaxdnn::conv {

struct WinogradGemmArgs {
  const void* a;
  const void* b;
  float* c;
  int64_t m, n, k;
};

// 16-bit operands on mma.sync: a 128 x 64 CTA tile, 8 warps of 32 x 32,
// k in steps of 32 through a 3-stage cp.async ring. Rows are padded by 16
// bytes so the ldmatrix reads of A (80-byte rows) and of B (144-byte rows)
// hit 8 different bank groups.
constexpr int kWgBm = 128, kWgBn = 64, kWgBk = 32, kWgStages = 3;
constexpr int kWgLdA = kWgBk + 8, kWgLdB = kWgBn + 8;

template <typename T>
__global__ void __launch_bounds__(256) WinogradGemmKernel(WinogradGemmArgs p) {
  __shared__ __align__(16) uint16_t as[kWgStages][kWgBm * kWgLdA];
  __shared__ __align__(16) uint16_t bs[kWgStages][kWgBk * kWgLdB];
  const int tid = threadIdx.x, lane = tid & 31, wm = tid >> 6, wn = (tid >> 5) & 1;
  const int64_t batch = blockIdx.z;
  const uint16_t* a = static_cast<const uint16_t*>(p.a) + (batch * p.m + int64_t(blockIdx.x) * kWgBm) * p.k;
  const uint16_t* b = static_cast<const uint16_t*>(p.b) + batch * p.k * p.n + int64_t(blockIdx.y) * kWgBn;
  float* c = p.c + (batch * p.m + int64_t(blockIdx.x) * kWgBm) * p.n + int64_t(blockIdx.y) * kWgBn;
  const int ktiles = int(p.k / kWgBk);

  auto load = [&](int kt, int stage) {
#pragma unroll
    for (int j = 0; j < kWgBm * 4 / 256; ++j) {  // A: 128 rows of 4 chunks
      const int i = tid + j * 256, r = i >> 2, ch = i & 3;
      sm80::CpAsync16(&as[stage][r * kWgLdA + ch * 8], a + int64_t(r) * p.k + kt * kWgBk + ch * 8, 16);
    }
    const int r = tid >> 3, ch = tid & 7;  // B: 32 rows of 8 chunks
    sm80::CpAsync16(&bs[stage][r * kWgLdB + ch * 8], b + int64_t(kt * kWgBk + r) * p.n + ch * 8, 16);
  };

  float acc[2][4][4] = {};
#pragma unroll
  for (int s = 0; s < kWgStages - 1; ++s) {
    if (s < ktiles) load(s, s);
    sm80::CpAsyncCommit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    sm80::CpAsyncWait<kWgStages - 2>();
    __syncthreads();  // stage kt landed for every thread; stage kt - 1 is free again
    const int next = kt + kWgStages - 1;
    if (next < ktiles) load(next, next % kWgStages);
    sm80::CpAsyncCommit();
    const uint16_t* at = as[kt % kWgStages];
    const uint16_t* bt = bs[kt % kWgStages];
#pragma unroll
    for (int ks = 0; ks < kWgBk / 16; ++ks) {
      uint32_t af[2][4], bf[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        sm80::LdMatrixX4(af[mi], at + (wm * 32 + mi * 16 + (lane & 15)) * kWgLdA + ks * 16 + (lane >> 4) * 8);
      // Transposed: registers 0 and 1 are n tile 2 nj's k halves, 2 and 3 n tile 2 nj + 1's.
#pragma unroll
      for (int nj = 0; nj < 2; ++nj)
        sm80::LdMatrixX4Trans(bf[nj],
                              bt + (ks * 16 + (lane & 15)) * kWgLdB + wn * 32 + nj * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int n8 = 0; n8 < 4; ++n8)
          sm80::MmaOp<T>::Run(acc[mi][n8], af[mi], bf[n8 >> 1][(n8 & 1) * 2], bf[n8 >> 1][(n8 & 1) * 2 + 1]);
      }
    }
  }
  sm80::CpAsyncWait<0>();
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int n8 = 0; n8 < 4; ++n8) {
      const int row = wm * 32 + mi * 16 + (lane >> 2), col = wn * 32 + n8 * 8 + 2 * (lane & 3);
      *reinterpret_cast<float2*>(c + int64_t(row) * p.n + col) = make_float2(acc[mi][n8][0], acc[mi][n8][1]);
      *reinterpret_cast<float2*>(c + int64_t(row + 8) * p.n + col) =
          make_float2(acc[mi][n8][2], acc[mi][n8][3]);
    }
  }
}

// float32 operands on FMAs (exact float32 products, as the CPU's): a 64 x 64
// CTA tile, 16 x 16 threads of 4 x 4 outputs, k in steps of 16.
constexpr int kWgF32Tile = 64, kWgF32Bk = 16;

__global__ void __launch_bounds__(256) WinogradGemmF32Kernel(WinogradGemmArgs p) {
  __shared__ float as[kWgF32Bk][kWgF32Tile + 4];  // [k][m]
  __shared__ __align__(16) float bs[kWgF32Bk][kWgF32Tile];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int64_t batch = blockIdx.z;
  const float* a = static_cast<const float*>(p.a) + (batch * p.m + int64_t(blockIdx.x) * kWgF32Tile) * p.k;
  const float* b = static_cast<const float*>(p.b) + batch * p.k * p.n + int64_t(blockIdx.y) * kWgF32Tile;
  float* c = p.c + (batch * p.m + int64_t(blockIdx.x) * kWgF32Tile) * p.n + int64_t(blockIdx.y) * kWgF32Tile;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < p.k; k0 += kWgF32Bk) {
    for (int i = tid; i < kWgF32Tile * kWgF32Bk; i += 256) {
      const int r = i / kWgF32Bk, kk = i % kWgF32Bk;
      as[kk][r] = a[int64_t(r) * p.k + k0 + kk];
      const int kb = i / kWgF32Tile, cc = i % kWgF32Tile;
      bs[kb][cc] = b[(k0 + kb) * p.n + cc];
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kWgF32Bk; ++kk) {
      float ra[4], rb[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        ra[i] = as[kk][ty * 4 + i];
        rb[i] = bs[kk][tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
    *reinterpret_cast<float4*>(c + int64_t(ty * 4 + i) * p.n + tx * 4) =
        make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
}

}  // namespace jaxdnn::conv
