// The sm90 backward's memory-bound passes: delta = rowsum(dO * O) before the
// main kernels, and the fixed-order sum of per-query-head dK/dV partials
// over each GQA group after them.
#pragma once

#include "attention/hopper/attention_sm90_backward_common.cuh"

namespace jaxdnn::attention::sm90 {

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
  constexpr int kPer = kD / 32;  // 2, 4 or 8 elements per lane
  if constexpr (kPer == 8) {
    const uint4 ov = *reinterpret_cast<const uint4*>(o + lane * 8);
    const uint4 dv = *reinterpret_cast<const uint4*>(d + lane * 8);
    const uint16_t* oe = reinterpret_cast<const uint16_t*>(&ov);
    const uint16_t* de = reinterpret_cast<const uint16_t*>(&dv);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc += BwdLoad<kF16>(oe + e) * BwdLoad<kF16>(de + e);
  } else if constexpr (kPer == 4) {
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
  ok.x = PackPair<kF16>(sk.x, sk.y);
  ok.y = PackPair<kF16>(sk.z, sk.w);
  ov.x = PackPair<kF16>(sv.x, sv.y);
  ov.y = PackPair<kF16>(sv.z, sv.w);
  *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p.dk) + e) = ok;
  *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p.dv) + e) = ov;
}

}  // namespace jaxdnn::attention::sm90
