// Instantiates the CUDA attention kernels for each dtype and head dim and
// launches them on XLA's stream.
#include "attention/launch_cuda.h"

#include <algorithm>
#include <string>

#include "attention/sm80/backward.cuh"
#include "attention/sm80/decode_split.h"
#include "attention/sm90/backward.h"
#include "attention/sm90/backward_fused.h"
#include "attention/sm90/forward.h"
#include "attention/plan.h"
#include "common/switches.h"

namespace jaxdnn::attention {
namespace {

template <typename T, int kD>
cudaError_t LaunchFwd(const AttnFwdArgs& p, cudaStream_t stream) {
  constexpr int kSmem = FwdSmemBytes<kD>();
  // Opting in to more than 48 KB of dynamic shared memory is a per-function,
  // per-device attribute: set on every launch (a host-side call, not a stream
  // operation, so safe under graph capture), as each GPU of a process needs it.
  const cudaError_t configured =
      cudaFuncSetAttribute(AttentionFwdKernel<T, kD>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (configured != cudaSuccess) return configured;
  const dim3 grid(unsigned((p.shape.q_len + kFwdBlockM - 1) / kFwdBlockM), unsigned(p.shape.heads),
                  unsigned(p.shape.batch));
  AttentionFwdKernel<T, kD><<<grid, kFwdThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
LaunchStatus FwdByHeadDim(const AttnFwdArgs& p, cudaStream_t stream) {
  switch (p.shape.head_dim) {
    case 64: return LaunchFwd<T, 64>(p, stream);
    case 128: return LaunchFwd<T, 128>(p, stream);
    case 256: return LaunchFwd<T, 256>(p, stream);
    default:
      return LaunchStatus::Refused(
          "no sm80 forward is compiled for this head dim (64, 128, 256; 96 and 192 run unpadded on sm90 "
          "only, where the call was traced on an sm90 device)");
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
    if ((err = LaunchDbiasReduce(ws.dbias_full, p.dbias, p.bias, s, stream)) != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <typename T>
LaunchStatus BwdByHeadDim(const AttnBwdArgs& p, cudaStream_t stream) {
  switch (p.shape.head_dim) {
    case 64: return LaunchBwd<T, 64>(p, stream);
    case 128: return LaunchBwd<T, 128>(p, stream);
    case 256: return LaunchBwd<T, 256>(p, stream);
    default:
      return LaunchStatus::Refused(
          "no sm80 backward is compiled for this head dim (64, 128, 256; 96 and 192 run unpadded on sm90 "
          "only, "
          "where the call was traced on an sm90 device)");
  }
}

}  // namespace

// Which backward runs: the fused Hopper one (dK/dV/dQ in one kernel) from
// plan.h's query-length thresholds up (FusedBackwardFirst), else the
// two-kernel Hopper one (delta, dK/dV and dQ passes), else the sm80 mma.sync
// one. The evidence for the thresholds is in docs/perf/attention.md.
BwdPath AttentionBwdPath(const AttnBwdArgs& p) {
  if (p.shape.q_len > 0 && p.shape.kv_len > 0 && p.shape.heads > 0 &&
      SwitchInt(Switch::kAttentionSm90Bwd, -1) != 0) {
    const bool fused_first = FusedBackwardFirst(p.shape.q_len, Sm90FusedBackwardOrdered(p));
    // The fused backward takes dense problems and segment ids alone (its
    // support check builds on Sm90BackwardSupports, which also takes the
    // other masked cases); segment problems follow the same size rule.
    if (fused_first && Sm90FusedBackwardSupports(p)) return BwdPath::kSm90Fused;
    if (Sm90BackwardSupports(p)) return BwdPath::kSm90;
  }
  if (p.shape.q_len == 0 || p.shape.kv_len == 0 || p.shape.heads == 0) return BwdPath::kZeros;
  return BwdPath::kSm80;
}

LaunchStatus AttentionBwdCuda(const AttnBwdArgs& p, cudaStream_t stream) {
  if (p.shape.batch == 0) return cudaSuccess;
  switch (AttentionBwdPath(p)) {
    case BwdPath::kSm90Fused: return LaunchAttentionBwdSm90Fused(p, stream);
    case BwdPath::kSm90: return LaunchAttentionBwdSm90(p, stream);
    case BwdPath::kSm80: break;
    case BwdPath::kZeros: {
      // Nothing attends (no query heads included): every gradient is zero.
      const int64_t eb = p.dtype == ffi::DataType::F32 ? 4 : 2;
      const AttnShape& s = p.shape;
      cudaError_t err = cudaMemsetAsync(p.dq, 0, s.batch * s.q_len * s.heads * s.head_dim * eb, stream);
      if (err == cudaSuccess)
        err = cudaMemsetAsync(p.dk, 0, s.batch * s.kv_len * s.kv_heads * s.head_dim * eb, stream);
      if (err == cudaSuccess)
        err = cudaMemsetAsync(p.dv, 0, s.batch * s.kv_len * s.kv_heads * s.head_dim * eb, stream);
      if (err == cudaSuccess && p.dbias != nullptr) {
        err = cudaMemsetAsync(p.dbias, 0,
                              p.bias.dims[0] * p.bias.dims[1] * p.bias.dims[2] * p.bias.dims[3] * 4, stream);
      }
      return err;
    }
  }
  switch (p.dtype) {
    case ffi::DataType::BF16: return BwdByHeadDim<__nv_bfloat16>(p, stream);
    case ffi::DataType::F16: return BwdByHeadDim<__half>(p, stream);
    default: return LaunchStatus::Refused("the CUDA backward takes bfloat16 and float16 only");
  }
}

// The Hopper kernel (TMA, wgmma, warp-specialized) takes the dense cases it
// covers; JAXDNN_ATTENTION_SM90=0 keeps every case on the mma.sync kernel
// (for A/B timing).
static bool Sm90ForwardEnabled() { return SwitchOn(Switch::kAttentionSm90); }

// The split-KV decode forward (cpp/attention/sm80/decode_split.cu) for a few query tokens
// over a long key/value cache (self-test passed on an H200: 3.06 TB/s at
// batch 1 over 128k keys, where the prefill forward reached 0.75;
// docs/perf/attention.md, Standing decisions: Split-KV decode, wave-fitted).
// JAXDNN_ATTENTION_DECODE=0 turns it off (read once, at first use).
// jaxdnn/attention/primitives.py reads the same variable to size the
// workspace; without one large enough the forward goes on as before.
static bool DecodeSplitEnabled() { return SwitchOn(Switch::kAttentionDecode); }

LaunchStatus AttentionFwdCuda(const AttnFwdArgs& p, cudaStream_t stream) {
  if (p.shape.batch == 0 || p.shape.q_len == 0 || p.shape.heads == 0) return cudaSuccess;
  if (p.shape.vdim() != p.shape.head_dim) {  // MLA: the sm90 kernels only
    if (Sm90ForwardEnabled() && Sm90ForwardSupports(p)) return LaunchAttentionFwdSm90(p, stream);
    return LaunchStatus::Refused(
        "a value head dim of its own runs on the sm90 forward only (192/128, 128/64 where switched on; "
        "dense, no bias, mask or dropout)");
  }
  if (DecodeSplitEnabled() && DecodeSplitSupports(p)) {
    DecodeSplitPlan plan;
    if (LaunchStatus st = FitDecodeSplitPlanToWaves(p, MakeDecodeSplitPlan(p.shape), &plan); !st.ok()) {
      return st;
    }
    return LaunchAttentionFwdDecodeSplit(p, plan, stream);
  }
  if (Sm90ForwardEnabled() && Sm90ForwardSupports(p)) return LaunchAttentionFwdSm90(p, stream);
  switch (p.dtype) {
    case ffi::DataType::BF16: return FwdByHeadDim<__nv_bfloat16>(p, stream);
    case ffi::DataType::F16: return FwdByHeadDim<__half>(p, stream);
    default: return LaunchStatus::Refused("the CUDA forward takes bfloat16 and float16 only");
  }
}

}  // namespace jaxdnn::attention
