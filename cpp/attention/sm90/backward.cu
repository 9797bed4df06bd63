// Host launcher of the Hopper attention backward (see attention/sm90/backward.cuh).
#include "attention/sm90/backward.h"

#include <algorithm>
#include <cstdint>

#include "attention/dbias_reduce.h"
#include "attention/plan.h"
#include "attention/sm90/backward.cuh"
#include "attention/sm90/mask_params.h"
#include "attention/sm90/blocks.cuh"
#include "common/switches.h"

namespace jaxdnn::attention {

namespace {

// The bias on the two-kernel sm90 backward (attention/sm90/backward_bias.cuh);
// JAXDNN_ATTENTION_SM90_BIAS=0 keeps it on the mma.sync one, as the forward.
bool Sm90BackwardBiasEnabled() { return SwitchOn(Switch::kAttentionSm90Bias); }

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

// The dK/dV kernel and its configuration per head dim (a function, so that
// the kernel is instantiated where it is launched, in the order it was before).
template <int kD, bool kF16, bool kOverlapKV, bool kExt, bool kBias>
struct DkDvKernelFor {
  using Cfg = sm90::DkDvConfig<kD>;
  static auto Kernel() { return sm90::AttnBwdDkDvSm90Kernel<kD, kF16, kOverlapKV, kExt, kBias>; }
};
template <int kD, bool kF16, bool kExt, bool kBias>
struct WideDkDvKernelFor {
  static_assert(!kBias, "no head dim 192 / 256 bias backward");
  using Cfg = sm90::DkDvWideConfig<kD>;
  static auto Kernel() { return sm90::AttnBwdDkDvWideKernel<kD, kF16, kExt>; }
};
template <bool kF16, bool kOverlapKV, bool kExt, bool kBias>
struct DkDvKernelFor<192, kF16, kOverlapKV, kExt, kBias> : WideDkDvKernelFor<192, kF16, kExt, kBias> {};
template <bool kF16, bool kOverlapKV, bool kExt, bool kBias>
struct DkDvKernelFor<256, kF16, kOverlapKV, kExt, kBias> : WideDkDvKernelFor<256, kF16, kExt, kBias> {};

// The float32 elements of the workspace before the dbias staging area
// (GQA's dK/dV partials, delta), rounded to 16 bytes.
int64_t DbiasStagingOffset(const AttnShape& s) {
  int64_t n = s.batch * s.heads * s.q_len;
  if (s.heads != s.kv_heads) n += 2 * s.batch * s.kv_len * s.heads * s.head_dim;
  return (n + 3) / 4 * 4;
}

// How dS becomes dbias (attention/sm90/backward_bias.cuh): stored as it is
// (dbias [batch, heads, q_len, kv_len]); chained, when the bias broadcasts
// over batch and/or heads only and every (batch, head) walks the same blocks
// (no lengths or segment ids): the pairs sharing a slice add into it in
// turn; else staged in a full-size float32 area and summed by a reduction.
enum class DbiasMode { kDirect, kChained, kStaged };
DbiasMode DbiasModeOf(const AttnBwdArgs& a) {
  const AttnShape& s = a.shape;
  const int64_t* d = a.bias.dims;
  if (!DbiasNeedsStaging(a.bias, s)) return DbiasMode::kDirect;
  const AttnMaskParams& m = a.mask_params;
  const bool same_walk = m.q_lengths == nullptr && m.kv_lengths == nullptr && m.q_segments == nullptr;
  return same_walk && d[2] == s.q_len && d[3] == s.kv_len ? DbiasMode::kChained : DbiasMode::kStaged;
}

// The chains' progress counters: a warp's blocks done per (batch, head, query tile).
int64_t DbiasProgressInts(const AttnShape& s) { return s.batch * s.heads * ((s.q_len + 127) / 128) * 8; }

// The float32 workspace elements a bias backward needs beyond delta and
// partials (none without dbias: a mask sent as a bias).
int64_t DbiasExtraElems(const AttnBwdArgs& a) {
  if (a.dbias == nullptr) return 0;
  switch (DbiasModeOf(a)) {
    case DbiasMode::kDirect: return 0;
    case DbiasMode::kChained: return DbiasProgressInts(a.shape);
    case DbiasMode::kStaged: break;
  }
  return a.shape.batch * a.shape.heads * a.shape.q_len * a.shape.kv_len;
}

template <int kD, bool kF16, int kDqBlockN, bool kOverlapKV, bool kOverlapQ, bool kExt, bool kBias = false>
cudaError_t Launch(const AttnBwdArgs& a, cudaStream_t stream, bool run_dkdv, bool run_dq, bool head_major) {
  using DkDvCfg = typename DkDvKernelFor<kD, kF16, kOverlapKV, kExt, kBias>::Cfg;
  using DqCfg = sm90::DqConfig<kD, kDqBlockN>;
  const AttnShape& s = a.shape;
  cudaError_t err;

  sm90::BwdKernelParams<kExt> p;
  p.batch = static_cast<int>(s.batch);
  p.q_len = static_cast<int>(s.q_len);
  p.kv_len = static_cast<int>(s.kv_len);
  p.heads = static_cast<int>(s.heads);
  p.kv_heads = static_cast<int>(s.kv_heads);
  p.group = static_cast<int>(s.heads / s.kv_heads);
  p.causal = a.mask_params.causal ? 1 : 0;
  p.head_major = head_major ? 1 : 0;
  p.scale = a.mask_params.scale;
  p.scale_log2 = a.mask_params.scale * 1.4426950408889634f;
  p.out = a.out;
  p.dout = a.dout;
  p.lse = a.lse;
  const int64_t part_elems = s.batch * s.kv_len * s.heads * s.head_dim;
  // Workspace (float32): with GQA the per-query-head dK and dV partials come
  // first (16-byte aligned), then delta; otherwise delta alone.
  if (p.group > 1) {
    p.dk_part = a.workspace;
    p.dv_part = a.workspace + part_elems;
    p.delta = a.workspace + 2 * part_elems;
  } else {
    p.dk_part = nullptr;
    p.dv_part = nullptr;
    p.delta = a.workspace;
  }
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv = a.dv;
  if constexpr (kExt) {
    p.mask = sm90::MakeSm90MaskParams(a.mask_params, s);
    if (p.mask.softcap > 0.f) {
      // s = c * tanh(raw * scale / c), P = exp(s - lse); the epilogues'
      // final * scale is the scale part of d s / d raw.
      p.scale_log2 = 1.4426950408889634f;
      p.inv_cap_log2e = 1.f / (p.mask.softcap * 1.4426950408889634f);
    }
  }
  bool staging = false;
  if constexpr (kBias) {
    // dS into dbias itself (its own shape, or chained over a broadcast batch
    // and/or heads), else into the staging area a reduction sums (see
    // DbiasMode); the kernel zero-fills what no band reaches.
    p.bias.bias = sm90::MakeSm90BiasParams(a.bias, a.bias_dtype, a.mask_params);
    // Natural units (the forward's): the kernels scale the raw scores and add
    // the bias (no softcap with a bias here); P = exp2((s - lse) * log2 e).
    // Without dbias (a boolean mask sent as 0 / -inf) no target: dS is not
    // stored.
    p.scale_log2 = 1.4426950408889634f;
    const DbiasMode mode = a.dbias == nullptr ? DbiasMode::kDirect : DbiasModeOf(a);
    staging = mode == DbiasMode::kStaged;
    const int64_t* d = a.bias.dims;
    const int64_t rows = s.q_len * s.kv_len;
    p.bias.target = staging ? a.workspace + DbiasStagingOffset(s) : a.dbias;
    p.bias.slice_h = staging || d[1] != 1 ? rows : 0;
    p.bias.slice_b = staging ? s.heads * rows : d[0] != 1 ? d[1] * rows : 0;
    if (mode == DbiasMode::kChained) {
      p.bias.chain_b = d[0] == 1 && s.batch > 1;
      p.bias.chain_h = d[1] == 1 && s.heads > 1;
      p.bias.progress = reinterpret_cast<int*>(a.workspace + DbiasStagingOffset(s));
      if ((err = cudaMemsetAsync(p.bias.progress, 0, DbiasProgressInts(s) * sizeof(int), stream)) !=
          cudaSuccess)
        return err;
    }
  }

  // The delta pre-pass and the GQA sum need no mask.
  const sm90::BwdParams& dense_p = p;

  // 1. delta.
  if ((err = sm90::LaunchBwdDelta<kD, kF16>(dense_p, stream)) != cudaSuccess) return err;

  // 2. dK / dV.
  if (run_dkdv) {
    CUtensorMap tq, tk, tv, tdo;
    if ((err = sm90::MakeBhsdTensorMap(&tq, a.q, kF16, s.batch, s.q_len, s.heads, kD, DkDvCfg::kBlockM)) !=
        cudaSuccess)
      return err;
    if ((err = sm90::MakeBhsdTensorMap(&tdo, a.dout, kF16, s.batch, s.q_len, s.heads, kD,
                                       DkDvCfg::kBlockM)) != cudaSuccess)
      return err;
    if ((err = sm90::MakeBhsdTensorMap(&tk, a.k, kF16, s.batch, s.kv_len, s.kv_heads, kD,
                                       DkDvCfg::kBlockN)) != cudaSuccess)
      return err;
    if ((err = sm90::MakeBhsdTensorMap(&tv, a.v, kF16, s.batch, s.kv_len, s.kv_heads, kD,
                                       DkDvCfg::kBlockN)) != cudaSuccess)
      return err;
    auto kernel = DkDvKernelFor<kD, kF16, kOverlapKV, kExt, kBias>::Kernel();
    int smem_bytes = kExt ? DkDvCfg::kSmemBytesExt : DkDvCfg::kSmemBytes;
    if constexpr (kBias) smem_bytes = DkDvCfg::kSmemBytesBias;
    if ((err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes)) !=
        cudaSuccess) {
      return err;
    }
    const int64_t nb = (s.kv_len + DkDvCfg::kBlockN - 1) / DkDvCfg::kBlockN;
    const dim3 grid = head_major ? dim3(static_cast<unsigned>(s.batch * s.heads * nb), 1)
                                 : dim3(static_cast<unsigned>(s.batch * s.heads), static_cast<unsigned>(nb));
    kernel<<<grid, DkDvCfg::kThreads, smem_bytes, stream>>>(tq, tk, tv, tdo, p);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }

  // 3. dQ.
  if (run_dq) {
    CUtensorMap tq, tk, tv, tdo;
    if ((err = sm90::MakeBhsdTensorMap(&tq, a.q, kF16, s.batch, s.q_len, s.heads, kD, DqCfg::kBlockM)) !=
        cudaSuccess)
      return err;
    if ((err = sm90::MakeBhsdTensorMap(&tdo, a.dout, kF16, s.batch, s.q_len, s.heads, kD, DqCfg::kBlockM)) !=
        cudaSuccess)
      return err;
    if ((err = sm90::MakeBhsdTensorMap(&tk, a.k, kF16, s.batch, s.kv_len, s.kv_heads, kD, DqCfg::kBlockN)) !=
        cudaSuccess)
      return err;
    if ((err = sm90::MakeBhsdTensorMap(&tv, a.v, kF16, s.batch, s.kv_len, s.kv_heads, kD, DqCfg::kBlockN)) !=
        cudaSuccess)
      return err;
    auto kernel = sm90::AttnBwdDqSm90Kernel<kD, kF16, kDqBlockN, kOverlapQ, kExt, kBias>;
    const int smem_bytes = kBias ? DqCfg::kSmemBytesBias : kExt ? DqCfg::kSmemBytesExt : DqCfg::kSmemBytes;
    if ((err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes)) !=
        cudaSuccess) {
      return err;
    }
    const int64_t mb = (s.q_len + DqCfg::kBlockM - 1) / DqCfg::kBlockM;
    const dim3 grid = head_major ? dim3(static_cast<unsigned>(s.batch * s.heads * mb), 1)
                                 : dim3(static_cast<unsigned>(s.batch * s.heads), static_cast<unsigned>(mb));
    kernel<<<grid, DqCfg::kThreads, smem_bytes, stream>>>(tq, tk, tv, tdo, p);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }

  // 4. GQA: fixed-order sum of the group's per-query-head partials.
  if (p.group > 1 && run_dkdv) {
    const int64_t total4 = s.batch * s.kv_len * s.kv_heads * kD / 4;
    const int threads = 256;
    const int64_t blocks = (total4 + threads - 1) / threads;
    sm90::AttnBwdGroupReduceKernel<kD, kF16><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(dense_p);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }
  // 5. A broadcast bias: dbias summed from the staged dS.
  if constexpr (kBias) {
    if (staging && run_dq) {
      if ((err = LaunchDbiasReduce(p.bias.target, a.dbias, a.bias, s, stream)) != cudaSuccess) return err;
    }
  }
  return cudaSuccess;
}

}  // namespace

bool Sm90BackwardSupports(const AttnBwdArgs& p) {
  // The shapes, flags and switches: the plan's predicate, which also sizes
  // the workspace (attention/plan.h).
  if (!Sm90BackwardShapeFits(ProblemOf(p, OperandsOf(p)))) return false;
  const AttnShape& s = p.shape;
  const AttnMaskParams& m = p.mask_params;
  if (Sm90BackwardNeedsMasking(p)) {
    // What the flags do not say (Python never passes these).
    if ((m.q_segments == nullptr) != (m.kv_segments == nullptr)) return false;
    if (m.softcap < 0.f || !(m.softcap == m.softcap)) return false;
  }
  // A bias: 16-bit with contiguous keys (the stages' rule), without softcap
  // (whose gradient factor the kernels rebuild from P), head dims 64 and 128;
  // with its gradient, the staging area of a broadcast one after the
  // workspace's other regions.
  int64_t staging = 0;
  if (p.bias.data != nullptr) {
    if (!Sm90BackwardBiasEnabled() || !sm90::Sm90BiasFits(p.bias, p.bias_dtype, s) || m.softcap != 0.f ||
        s.head_dim > 128 || (p.dbias != nullptr && !Aligned16(p.dbias))) {
      return false;
    }
    if (p.dbias != nullptr) staging = DbiasStagingOffset(s) + DbiasExtraElems(p);
  }
  if (!Aligned16(p.q) || !Aligned16(p.k) || !Aligned16(p.v) || !Aligned16(p.out) || !Aligned16(p.dout) ||
      !Aligned16(p.dq) || !Aligned16(p.dk) || !Aligned16(p.dv) || !Aligned16(p.workspace) ||
      p.lse == nullptr || p.workspace == nullptr) {
    return false;
  }
  int64_t need = s.batch * s.heads * s.q_len;
  if (s.heads != s.kv_heads) need += 2 * s.batch * s.kv_len * s.heads * s.head_dim;
  if (p.workspace_elems < std::max(need, staging)) return false;
  return sm90::Sm90DeviceReady(p.device);
}

bool Sm90BackwardNeedsMasking(const AttnBwdArgs& a) {
  const AttnMaskParams& m = a.mask_params;
  return a.bias.data != nullptr || m.q_lengths != nullptr || m.kv_lengths != nullptr ||
         m.q_segments != nullptr || m.kv_segments != nullptr || m.window_left >= 0 || m.window_right >= 0 ||
         m.softcap != 0.f || (m.causal && a.shape.q_len != a.shape.kv_len);
}

LaunchStatus LaunchAttentionBwdSm90Variant(const AttnBwdArgs& p, cudaStream_t stream, int variant) {
  const bool f16 = p.dtype == ffi::DataType::F16;
  const int d = static_cast<int>(p.shape.head_dim);
  if (variant < 0) variant = d == 64 ? 57 : 1;  // see kSm90BwdDefaultVariant
  const bool dq128 = (variant & 1) != 0;
  const bool run_dkdv = (variant & 2) == 0;
  const bool run_dq = (variant & 4) == 0;
  const bool head_major = (variant & 8) != 0;
  // The extended path runs without the overlap variants (bits 16, 32).
  const bool ext = Sm90BackwardNeedsMasking(p);
  const bool ov_kv = !ext && (variant & 16) != 0;
  const bool ov_q = !ext && (variant & 32) != 0;
  if (p.bias.data != nullptr) {
    // The bias kernels: 128-key dQ steps (variant bit 1 ignored). dbias is
    // the dQ kernel's, so that kernel cannot be skipped (bit 4).
    if (!run_dq) return LaunchStatus::Refused("the sm90 bias backward writes dbias in its dQ kernel (bit 4)");
    // (Softcap's gradient factor reads the log2 lse of the unbiased kernels.)
    if (p.mask_params.softcap != 0.f) return LaunchStatus::Refused("the sm90 bias backward takes no softcap");
    if (d == 128) {
      return f16 ? Launch<128, true, 128, false, false, true, true>(p, stream, run_dkdv, run_dq, head_major)
                 : Launch<128, false, 128, false, false, true, true>(p, stream, run_dkdv, run_dq, head_major);
    }
    if (d == 64) {
      return f16 ? Launch<64, true, 128, false, false, true, true>(p, stream, run_dkdv, run_dq, head_major)
                 : Launch<64, false, 128, false, false, true, true>(p, stream, run_dkdv, run_dq, head_major);
    }
    return LaunchStatus::Refused("no sm90 bias backward is compiled for this head dim");
  }
  if (d == 96) {
    // Head dim 96 (the 128 layout, gemms over 96 columns): 128-key dQ steps,
    // no overlap variants (bits 1, 16 and 32 ignored).
    if (ext) {
      return f16 ? Launch<96, true, 128, false, false, true>(p, stream, run_dkdv, run_dq, head_major)
                 : Launch<96, false, 128, false, false, true>(p, stream, run_dkdv, run_dq, head_major);
    }
    return f16 ? Launch<96, true, 128, false, false, false>(p, stream, run_dkdv, run_dq, head_major)
               : Launch<96, false, 128, false, false, false>(p, stream, run_dkdv, run_dq, head_major);
  }
  if (ext) {
#define JAXDNN_SM90_BWD_EXT_CASE(D, BN)                                                             \
  if (d == D && dq128 == (BN == 128)) {                                                             \
    return f16 ? Launch<D, true, BN, false, false, true>(p, stream, run_dkdv, run_dq, head_major)   \
               : Launch<D, false, BN, false, false, true>(p, stream, run_dkdv, run_dq, head_major); \
  }
    JAXDNN_SM90_BWD_EXT_CASE(128, 128)
    JAXDNN_SM90_BWD_EXT_CASE(128, 64)
    JAXDNN_SM90_BWD_EXT_CASE(64, 128)
    JAXDNN_SM90_BWD_EXT_CASE(64, 64)
#undef JAXDNN_SM90_BWD_EXT_CASE
    if (d != 192 && d != 256)
      return LaunchStatus::Refused("no masked sm90 backward is compiled for this head dim");
  }
#define JAXDNN_SM90_BWD_CASE(D, BN, OK, OQ)                                                    \
  if (d == D && dq128 == (BN == 128) && ov_kv == OK && ov_q == OQ) {                           \
    return f16 ? Launch<D, true, BN, OK, OQ, false>(p, stream, run_dkdv, run_dq, head_major)   \
               : Launch<D, false, BN, OK, OQ, false>(p, stream, run_dkdv, run_dq, head_major); \
  }
#define JAXDNN_SM90_BWD_CASES(OK, OQ)    \
  JAXDNN_SM90_BWD_CASE(128, 128, OK, OQ) \
  JAXDNN_SM90_BWD_CASE(128, 64, OK, OQ)  \
  JAXDNN_SM90_BWD_CASE(64, 128, OK, OQ)  \
  JAXDNN_SM90_BWD_CASE(64, 64, OK, OQ)
  JAXDNN_SM90_BWD_CASES(false, false)
  JAXDNN_SM90_BWD_CASES(true, false)
  JAXDNN_SM90_BWD_CASES(false, true)
  JAXDNN_SM90_BWD_CASES(true, true)
#undef JAXDNN_SM90_BWD_CASES
#undef JAXDNN_SM90_BWD_CASE
  // Head dims 192 and 256: one instantiation per path (32-key dQ steps, no
  // overlap: variant bits 1, 16 and 32 are ignored; 2, 4 and 8 apply).
#define JAXDNN_SM90_BWD_WIDE_CASE(D)                                                                  \
  if (d == D) {                                                                                       \
    if (ext) {                                                                                        \
      return f16 ? Launch<D, true, 32, false, false, true>(p, stream, run_dkdv, run_dq, head_major)   \
                 : Launch<D, false, 32, false, false, true>(p, stream, run_dkdv, run_dq, head_major); \
    }                                                                                                 \
    return f16 ? Launch<D, true, 32, false, false, false>(p, stream, run_dkdv, run_dq, head_major)    \
               : Launch<D, false, 32, false, false, false>(p, stream, run_dkdv, run_dq, head_major);  \
  }
  JAXDNN_SM90_BWD_WIDE_CASE(192)
  JAXDNN_SM90_BWD_WIDE_CASE(256)
#undef JAXDNN_SM90_BWD_WIDE_CASE
  return LaunchStatus::Refused("no sm90 backward is compiled for this head dim and variant");
}

LaunchStatus LaunchAttentionBwdSm90(const AttnBwdArgs& p, cudaStream_t stream) {
  return LaunchAttentionBwdSm90Variant(p, stream, kSm90BwdDefaultVariant);
}

}  // namespace jaxdnn::attention
