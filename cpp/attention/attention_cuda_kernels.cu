// Instantiates the CUDA attention kernels for each dtype and head dim and
// launches them on XLA's stream.
#include "attention/attention_cuda_kernels.h"

#include <algorithm>
#include <string>

#include "attention/attention_cuda_backward.cuh"
#include "attention/decode/attention_decode_split.h"
#include "attention/hopper/attention_sm90_backward.h"
#include "attention/hopper/attention_sm90_backward_fused.h"
#include "attention/hopper/attention_sm90_forward.h"
#include "common/env_switch.h"

namespace jaxdnn::attention {
namespace {

template <typename T, int kD>
cudaError_t LaunchFwd(const AttnFwdArgs& p, cudaStream_t stream) {
  constexpr int kSmem = FwdSmemBytes<kD>();
  // Opting in to more than 48 KB of dynamic shared memory is a per-function,
  // per-device attribute: set on every launch (a host-side call, not a stream
  // operation, so safe under graph capture), as each GPU of a process needs it.
  const cudaError_t configured = cudaFuncSetAttribute(
      AttentionFwdKernel<T, kD>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (configured != cudaSuccess) return configured;
  const dim3 grid(unsigned((p.shape.q_len + kFwdBlockM - 1) / kFwdBlockM), unsigned(p.shape.heads),
                  unsigned(p.shape.batch));
  AttentionFwdKernel<T, kD><<<grid, kFwdThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t FwdByHeadDim(const AttnFwdArgs& p, cudaStream_t stream) {
  switch (p.shape.head_dim) {
    case 64: return LaunchFwd<T, 64>(p, stream);
    case 128: return LaunchFwd<T, 128>(p, stream);
    case 256: return LaunchFwd<T, 256>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename Kernel>
cudaError_t AllowSmem(Kernel kernel, int bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

template <typename T, int kD>
cudaError_t LaunchBwd(const AttnBwdArgs& p, cudaStream_t stream) {
  const AttnShape& s = p.shape;
  const bool staging = p.dbias != nullptr && DbiasNeedsStaging(p.bias, s);
  BwdWorkspace ws;
  ws.delta = p.workspace;
  ws.dk_part = ws.delta + s.batch * s.heads * s.q_len;
  ws.dv_part = ws.dk_part + s.batch * s.kv_len * s.heads * kD;
  ws.dbias_full = staging ? ws.dv_part + s.batch * s.kv_len * s.heads * kD : nullptr;

  cudaError_t err;
  if (p.dbias != nullptr) {  // tiles outside every band are never visited: start from zero
    float* target = staging ? ws.dbias_full : p.dbias;
    const int64_t n = staging ? s.batch * s.heads * s.q_len * s.kv_len
                              : p.bias.dims[0] * p.bias.dims[1] * p.bias.dims[2] * p.bias.dims[3];
    if ((err = cudaMemsetAsync(target, 0, n * sizeof(float), stream)) != cudaSuccess) return err;
  }
  const int64_t rows = s.batch * s.q_len * s.heads;
  AttentionDeltaKernel<T><<<unsigned((rows + 7) / 8), 256, 0, stream>>>(p, ws.delta);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;

  const cudaError_t dq_ok = AllowSmem(AttentionDqKernel<T, kD>, DqSmemBytes<kD>());
  if (dq_ok != cudaSuccess) return dq_ok;
  const dim3 dq_grid(unsigned((s.q_len + kDqBlockM - 1) / kDqBlockM), unsigned(s.heads), unsigned(s.batch));
  AttentionDqKernel<T, kD><<<dq_grid, kBwdThreads, DqSmemBytes<kD>(), stream>>>(p, ws);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;

  const dim3 kv_grid(unsigned((s.kv_len + kKvBlockN - 1) / kKvBlockN), unsigned(s.heads), unsigned(s.batch));
  if constexpr (kD <= 128) {
    const cudaError_t ok = AllowSmem(AttentionDkDvKernel<T, kD, true, true>, KvSmemBytes<kD>());
    if (ok != cudaSuccess) return ok;
    AttentionDkDvKernel<T, kD, true, true><<<kv_grid, kBwdThreads, KvSmemBytes<kD>(), stream>>>(p, ws);
  } else {
    const cudaError_t ok_k = AllowSmem(AttentionDkDvKernel<T, kD, true, false>, KvSmemBytes<kD>());
    const cudaError_t ok_v = AllowSmem(AttentionDkDvKernel<T, kD, false, true>, KvSmemBytes<kD>());
    if (ok_k != cudaSuccess) return ok_k;
    if (ok_v != cudaSuccess) return ok_v;
    AttentionDkDvKernel<T, kD, true, false><<<kv_grid, kBwdThreads, KvSmemBytes<kD>(), stream>>>(p, ws);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    AttentionDkDvKernel<T, kD, false, true><<<kv_grid, kBwdThreads, KvSmemBytes<kD>(), stream>>>(p, ws);
  }
  if ((err = cudaGetLastError()) != cudaSuccess) return err;

  const int64_t n_kv = s.batch * s.kv_len * s.kv_heads * kD;
  const unsigned sum_blocks = unsigned(std::min<int64_t>((n_kv + 255) / 256, 65535));
  if (n_kv > 0) {
    AttentionGroupSumKernel<T><<<sum_blocks, 256, 0, stream>>>(ws.dk_part, static_cast<T*>(p.dk), s);
    AttentionGroupSumKernel<T><<<sum_blocks, 256, 0, stream>>>(ws.dv_part, static_cast<T*>(p.dv), s);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }
  if (staging) {
    const int64_t n = p.bias.dims[0] * p.bias.dims[1] * p.bias.dims[2] * p.bias.dims[3];
    AttentionDbiasReduceKernel<<<unsigned(std::min<int64_t>((n + 255) / 256, 65535)), 256, 0, stream>>>(
        ws.dbias_full, p.dbias, p.bias, s);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <typename T>
cudaError_t BwdByHeadDim(const AttnBwdArgs& p, cudaStream_t stream) {
  switch (p.shape.head_dim) {
    case 64: return LaunchBwd<T, 64>(p, stream);
    case 128: return LaunchBwd<T, 128>(p, stream);
    case 256: return LaunchBwd<T, 256>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

// Which backward runs. By default the Hopper ones, all checked on an H200
// (2026-11-22): the fused one (dK/dV/dQ in one kernel) and the two-kernel one
// (delta, dK/dV and dQ passes). With deterministic=True the fused one adds dQ
// in key-block order and wins from kFusedBackwardMinQueryLen query rows up
// (3-9% through jax; the two-kernel one is 3-15% faster below, results
// 2026-11-22-h200-attention-v7-*). With deterministic=False it adds dQ
// unordered and wins from kFusedBackwardUnorderedMinQueryLen rows up at head
// dim 128 (with its head-major grid, through jax: 1.21x the two-kernel one at
// seq 2048, 1.13x causal; results 2026-11-22-h200-attention-v14-*) and at
// head dim 64 (with its 128-query steps, variant 12: 1.17x the two-kernel one
// at seq 2048 in the self-test, 1.2-1.27x its own 64-query steps at 2048-8192;
// results 2026-11-22-h200-attention-v18-bwd-wide-*). With the 80-query steps
// (v23, v25) it also wins at seq 512 and 1024: fwd+bwd GPU-busy through jax
// 3-4% / 8-14% faster at head dim 128, 6-7% / 10-12% at 64, causal and not
// (results 2026-11-22-h200-attention-v27-short-bwd*); below 512 unmeasured.
// JAXDNN_ATTENTION_SM90_BWD=0 keeps the mma.sync backward, =1 the two-kernel
// one, =2 the fused one wherever it applies (for A/B timing). The Python side
// sizes the workspace by the same rule (jaxdnn/attention/primitives.py:
// FUSED_BACKWARD_MIN_QUERY_LEN*); the fused kernel refuses a workspace too
// small for it.
constexpr int64_t kFusedBackwardMinQueryLen = 8192;
constexpr int64_t kFusedBackwardUnorderedMinQueryLen = 512;

static int Sm90BackwardMode() {  // -1: by size
  static const int mode = [] {
    const std::string v = EnvSwitch("JAXDNN_ATTENTION_SM90_BWD");
    return v == "0" ? 0 : v == "1" ? 1 : v == "2" ? 2 : -1;
  }();
  return mode;
}

cudaError_t AttentionBwdCuda(const AttnBwdArgs& p, cudaStream_t stream) {
  if (p.shape.batch == 0 || p.shape.heads == 0) return cudaSuccess;
  const int mode = Sm90BackwardMode();
  if (p.shape.q_len > 0 && p.shape.kv_len > 0 && mode != 0) {
    const int64_t fused_from =
        Sm90FusedBackwardOrdered(p) ? kFusedBackwardMinQueryLen : kFusedBackwardUnorderedMinQueryLen;
    const bool fused_first = mode == 2 || (mode == -1 && p.shape.q_len >= fused_from);
    // The fused backward takes dense problems and segment ids alone (its
    // support check builds on Sm90BackwardSupports, which also takes the
    // other masked cases); segment problems follow the same size rule.
    if (fused_first && Sm90FusedBackwardSupports(p)) {
      return LaunchAttentionBwdSm90Fused(p, stream);
    }
    if (Sm90BackwardSupports(p)) return LaunchAttentionBwdSm90(p, stream);
  }
  if (p.shape.q_len == 0 || p.shape.kv_len == 0) {
    // Nothing attends: every gradient is zero.
    const int64_t eb = p.dtype == ffi::DataType::F32 ? 4 : 2;
    const AttnShape& s = p.shape;
    cudaError_t err = cudaMemsetAsync(p.dq, 0, s.batch * s.q_len * s.heads * s.head_dim * eb, stream);
    if (err == cudaSuccess) err = cudaMemsetAsync(p.dk, 0, s.batch * s.kv_len * s.kv_heads * s.head_dim * eb, stream);
    if (err == cudaSuccess) err = cudaMemsetAsync(p.dv, 0, s.batch * s.kv_len * s.kv_heads * s.head_dim * eb, stream);
    if (err == cudaSuccess && p.dbias != nullptr) {
      err = cudaMemsetAsync(p.dbias, 0, p.bias.dims[0] * p.bias.dims[1] * p.bias.dims[2] * p.bias.dims[3] * 4, stream);
    }
    return err;
  }
  switch (p.dtype) {
    case ffi::DataType::BF16: return BwdByHeadDim<__nv_bfloat16>(p, stream);
    case ffi::DataType::F16: return BwdByHeadDim<__half>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

// The Hopper kernel (TMA, wgmma, warp-specialized) takes the dense cases it
// covers; JAXDNN_ATTENTION_SM90=0 keeps every case on the mma.sync kernel
// (for A/B timing).
static bool Sm90ForwardEnabled() {
  static const bool enabled = EnvSwitch("JAXDNN_ATTENTION_SM90") != "0";
  return enabled;
}

// The split-KV decode forward (cpp/attention/decode) for a few query tokens
// over a long key/value cache (self-test passed on an H200, 2026-11-22: 3.06
// TB/s at batch 1 over 128k keys, where the prefill forward reached 0.75).
// JAXDNN_ATTENTION_DECODE=0 turns it off (read once, at first use).
// jaxdnn/attention/primitives.py reads the same variable to size the
// workspace; without one large enough the forward goes on as before.
static bool DecodeSplitEnabled() {
  static const bool enabled = EnvSwitch("JAXDNN_ATTENTION_DECODE") != "0";
  return enabled;
}

cudaError_t AttentionFwdCuda(const AttnFwdArgs& p, cudaStream_t stream) {
  if (p.shape.batch == 0 || p.shape.q_len == 0 || p.shape.heads == 0) return cudaSuccess;
  if (DecodeSplitEnabled() && DecodeSplitSupports(p)) {
    DecodeSplitPlan plan;
    if (cudaError_t err = FitDecodeSplitPlanToWaves(p, MakeDecodeSplitPlan(p.shape), &plan); err != cudaSuccess) {
      return err;
    }
    return LaunchAttentionFwdDecodeSplit(p, plan, stream);
  }
  if (Sm90ForwardEnabled() && Sm90ForwardSupports(p)) return LaunchAttentionFwdSm90(p, stream);
  switch (p.dtype) {
    case ffi::DataType::BF16: return FwdByHeadDim<__nv_bfloat16>(p, stream);
    case ffi::DataType::F16: return FwdByHeadDim<__half>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace jaxdnn::attention
