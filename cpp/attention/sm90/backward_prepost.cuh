// The sm90 backward's memory-bound passes: delta = rowsum(dO * O) before the
// main kernels, and the fixed-order sum of per-query-head dK/dV partials
// over each GQA group after them.
#pragma once

#include "attention/sm90/backward_common.cuh"

namespace jaxdnn::attention::sm90 {

// ---------------------------------------------------------------------------
// 1. delta = rowsum(dout * out): kD / 8 lanes per (b, i, h) row, one 16-byte
//    load of each per lane (several rows per warp below D = 256). With
//    dq_accum (the fused backward's unordered dQ accumulator, [b, h, rows per
//    (b, h) = accum_rows, D] float32), each row's accumulator row is zeroed in
//    the same pass instead of by a separate memset (rows past q_len are never
//    read, so they are left as they are).
// Lanes per row: kD / 8 rounded up to a power of two (the shuffle sum's
// groups); head dim 96: 16, the last 4 idle; 192: 32, the last 8 idle.
template <int kD>
constexpr int DeltaLanes() {
  return kD == 96 ? 16 : kD == 192 ? 32 : kD / 8;
}

template <int kD, bool kF16>
__global__ void __launch_bounds__(256)
    AttnBwdDeltaKernel(const BwdParams p, float* dq_accum, int64_t accum_rows) {
  constexpr int kLanes = DeltaLanes<kD>();
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = tid / kLanes;
  const int lane = static_cast<int>(tid % kLanes);
  const bool live = lane < kD / 8;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.q_len * p.heads;
  // Whole groups of kLanes lanes leave together, so the shuffles below see
  // only live lanes of their own group.
  if (row >= rows) return;
  // row = (b * q_len + i) * heads + h
  const uint4 zero4 = make_uint4(0u, 0u, 0u, 0u);
  const uint4 ov =
      live ? *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.out) + row * kD + lane * 8)
           : zero4;
  const uint4 dv =
      live ? *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.dout) + row * kD + lane * 8)
           : zero4;
  const uint16_t* oe = reinterpret_cast<const uint16_t*>(&ov);
  const uint16_t* de = reinterpret_cast<const uint16_t*>(&dv);
  float acc = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e) acc += BwdLoad<kF16>(oe + e) * BwdLoad<kF16>(de + e);
  const unsigned group_mask =
      kLanes == 32 ? 0xffffffffu : ((1u << kLanes) - 1) << (threadIdx.x % 32 / kLanes * kLanes);
#pragma unroll
  for (int off = kLanes / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(group_mask, acc, off);
  const int h = static_cast<int>(row % p.heads);
  const int64_t bi = row / p.heads;
  const int i = static_cast<int>(bi % p.q_len);
  const int b = static_cast<int>(bi / p.q_len);
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  if (lane == 0) p.delta[bh * p.q_len + i] = acc;
  if (dq_accum != nullptr) {
    float4* a = reinterpret_cast<float4*>(dq_accum + (bh * accum_rows + i) * kD);
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    // kD / 4 chunks over kLanes >= kD / 8 lanes: at most two each.
    static_assert(2 * kLanes * 4 >= kD, "the accumulator row's chunks");
    if (lane * 4 < kD) a[lane] = zero;
    if ((lane + kLanes) * 4 < kD) a[lane + kLanes] = zero;
  }
}

// Launches the delta pass (and the accumulator zeroing when dq_accum is set).
template <int kD, bool kF16>
cudaError_t LaunchBwdDelta(const BwdParams& p, cudaStream_t stream, float* dq_accum = nullptr,
                           int64_t accum_rows = 0) {
  const int64_t threads_total = static_cast<int64_t>(p.batch) * p.q_len * p.heads * DeltaLanes<kD>();
  const int threads = 256;
  const int64_t blocks = (threads_total + threads - 1) / threads;
  AttnBwdDeltaKernel<kD, kF16>
      <<<static_cast<unsigned>(blocks), threads, 0, stream>>>(p, dq_accum, accum_rows);
  return cudaGetLastError();
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
    sk.x += a.x;
    sk.y += a.y;
    sk.z += a.z;
    sk.w += a.w;
    sv.x += c.x;
    sv.y += c.y;
    sv.z += c.z;
    sv.w += c.w;
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
