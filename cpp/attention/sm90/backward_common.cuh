// Shared pieces of the sm90 attention backward: the launch parameters and
// 16-bit load/pack helpers.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "attention/sm90/backward_bias.cuh"
#include "attention/sm90/forward_mask.cuh"
#include "attention/sm90/blocks.cuh"
#include "common/sm80/min_nan.cuh"

namespace jaxdnn::attention::sm90 {

// P = exp2(x), x = s * scale_log2 - lse_log2. With float16 inputs P is also
// clamped to 1 (it can only exceed 1 through rounding): with logits near 1e9
// the float32 lse is tens of units off, and exp2 of that error would overflow
// dS and float16's gradients. The clamp passes NaN. bfloat16 has float32's
// range and skips it (about 1% of the backward; docs/perf/attention.md).
template <bool kF16>
__device__ __forceinline__ float ProbFromLogit(float x) {
  if constexpr (kF16) {
    return MinNaN(exp2f(x), 1.f);
  } else {
    return exp2f(x);
  }
}

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
  float* dk_part;  // [batch, kv_len, heads, D] float32, group > 1 only
  float* dv_part;
};

// The extended path's parameters (kernels with kExt = true; a separate type so
// the dense kernels' parameters stay as they were). With softcap, scale_log2
// is log2(e) (the softcap already applied the scale, as in the forward) and
// inv_cap_log2e is 1 / (softcap * log2(e)) (see BwdSoftcapFactor).
struct BwdExtParams : BwdParams {
  FwdMaskParams mask;
  float inv_cap_log2e = 0.f;
  BwdBiasParams bias;  // the kernels with kBias
};

template <bool kExt>
using BwdKernelParams = std::conditional_t<kExt, BwdExtParams, BwdParams>;

template <bool kF16>
__device__ __forceinline__ float BwdLoad(const uint16_t* p) {
  if constexpr (kF16) {
    return __half2float(*reinterpret_cast<const __half*>(p));
  } else {
    return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
  }
}

// A masked loader's last Q/dO slot: no data, info -1, every lane arriving
// with no bytes; it ends the consumers' step loop (the two-kernel dK/dV
// kernel and the fused kernel's segment path).
template <int kStages>
__device__ __forceinline__ void PublishEndSlot(uint64_t* q_empty, uint64_t* q_full, int32_t* info_smem,
                                               int it, int lane) {
  const int st = it % kStages;
  MbarWait(&q_empty[st], ((it / kStages) & 1) ^ 1);
  if (lane == 0) info_smem[st] = -1;
  MbarArrive(&q_full[st]);
}

// A row's lse in natural units, for the bias kernels (P = exp2((s - lse) * log2 e));
// -inf (no key) becomes +inf, so that P is 0 (BwdLse2 is the log2 one).
__device__ __forceinline__ float BwdLseNat(float lse) { return lse == -INFINITY ? INFINITY : lse; }
// P from a score and its row's lse (BwdLse2, or BwdLseNat with kSubFirst:
// the bias kernels' natural units, the difference taken first, so that
// equal huge logits (a bias of the dtype's lowest value) give a finite P and
// not an fma's rounding residue at 1e38 (inf or 0). P is 1 there, not 1 / n:
// the float32 lse m + log n rounds to m at that magnitude, so such a row's
// gradients are n times the reference's; a masked loss gives it a zero
// cotangent, and then they are zero as the reference's.)
template <bool kSubFirst>
__device__ __forceinline__ float BwdExponent(float s, float scale_log2, float lse) {
  return kSubFirst ? (s - lse) * scale_log2 : fmaf(s, scale_log2, -lse);
}

}  // namespace jaxdnn::attention::sm90
