// Host launcher of the fused Hopper attention backward
// (see attention/sm90/backward_fused.cuh). Both dQ modes checked on an H200
// (self-tests, and the ordered one through jax too; docs/perf/attention.md,
// Standing decisions: Fused sm90 backward).
#include "attention/sm90/backward_fused.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "attention/sm90/backward.h"
#include "attention/sm90/backward_fused.cuh"
#include "attention/sm90/backward_prepost.cuh"
#include "attention/sm90/blocks.cuh"
#include "common/switches.h"

namespace jaxdnn::attention {

namespace {

int64_t Round64(int64_t x) { return (x + 63) / 64 * 64; }

// The unordered mode's head-major grid with rotated query-block starts
// (FusedBwdParams::head_major): the fused backward alone 6-11% faster than in
// the key-block-major order at seq 4096-8192 (docs/perf/attention.md,
// Standing decisions: Head-major grid). JAXDNN_ATTENTION_SM90_BWD_ORDER=key
// (read once) keeps the key-block-major order.
bool FusedHeadMajor() { return SwitchText(Switch::kAttentionSm90BwdOrder) != "key"; }

// FusedBwdParams::head_group. Causal and packed-document key blocks differ
// in length, and with every (batch, head)'s key blocks in a row the last
// head's heaviest blocks started last; a makespan model put that tail at
// 5-6% of dense causal and 10% of the harness's packed documents. Groups of
// about 256 / key blocks heads (so a group is about two waves of CTAs, at
// most 8 heads: L2 keeps a few heads' Q, dO and dQ) cut it: packed documents
// -5..-7% time, causal -2..-2.5%; non-causal (equal key blocks) gains
// nothing, so it keeps 1 (docs/perf/attention.md, Standing decisions: Heads
// in groups for causal and segments).
// JAXDNN_ATTENTION_SM90_BWD_HEAD_GROUP=G (read once, >= 1) sets it for A/Bs.
int FusedHeadGroup(bool uneven_key_blocks, int64_t key_blocks) {
  const int forced = static_cast<int>(SwitchInt(Switch::kAttentionSm90BwdHeadGroup, 0));
  if (forced > 0) return forced;
  if (!uneven_key_blocks) return 1;
  return static_cast<int>(std::min<int64_t>(8, std::max<int64_t>(1, 256 / std::max<int64_t>(1, key_blocks))));
}

// JAXDNN_ATTENTION_SM90_BWD_FUSED_VARIANT (read once): the variant bits of
// LaunchAttentionBwdSm90FusedVariant for calls through jax, for A/Bs; -1 when
// unset (the defaults below).
int EnvFusedVariant() {
  const int64_t v = SwitchInt(Switch::kAttentionSm90BwdFusedVariant, -1);
  return v < 0 ? -1
               : static_cast<int>(v) & (kFusedThreeStages | kFusedDqFirst | kFusedTmaFirst | kFusedWideSteps |
                                        kFusedQ80Diag | kFusedDqRot | kFusedQ80);
}

// Defaults, unordered mode (docs/perf/attention.md, Standing decisions:
// Step-order variants; d64 with 128-query steps; 80-query steps at d128):
//   head dim 128: 37 = 3 Q/dO stages and 1 dQ buffer, TMA before lse/delta,
//     rotated dQ swizzle (5 fwd+bwd 0.3-3.9% faster than 0, 37 another
//     1.4-4.7% over 5);
//   head dim 64: 44 = 128-query steps, TMA first, rotated swizzle (12
//     1.19-1.25x variant 0 in the self-test, 44 another 1.4-4.2% over 12).
//   head dim 128, non-causal: 165 = 37 | 128, 80-query steps (runs as 132):
//     fwd+bwd 4-6% faster than 37 over seq 2k-16k. Causal: 181 = 165 | 16,
//     80-query steps from each key block's diagonal: 2-5% faster than 37.
// The ordered mode (deterministic) takes 32 at head dim 128 (checked against
// the reference with bitwise reruns, not timed: the same instructions with
// fewer bank conflicts) and keeps 0 at 64, whose variant 32 was not checked.
int DefaultFusedVariant(const AttnBwdArgs& p, bool ordered) {
  if (const int v = EnvFusedVariant(); v >= 0) return v;
  if (ordered) return p.shape.head_dim == 128 ? kFusedD128Ordered : 0;
  if (p.shape.head_dim == 128 && p.mask_params.causal) return kFusedD128Q80Causal;  // see Q80CausalEnabled
  return p.shape.head_dim == 128 ? kFusedD128Q80 : kFusedD64Wide;
}

// The default launch (variant -1, the environment's variant included) keeps
// bit 128 for causal calls: 80-query steps, from each key block's diagonal
// (181 = 165 | 16) unless the environment's variant says otherwise.
// JAXDNN_ATTENTION_SM90_BWD_Q80_CAUSAL=0 (read once) drops bit 128 for causal
// calls (37 runs, 64-query steps), for A/Bs. Explicit variants (self-tests)
// honour bit 128 for causal calls either way.
bool Q80CausalEnabled() { return SwitchOn(Switch::kAttentionSm90BwdQ80Causal); }

// The default launch with segment ids takes 80-query steps (variant bits
// 256 | 128; head dim 128, unordered): packed documents fwd+bwd GPU-busy
// 456 -> 473 TFLOP/s over unmasked blocks (docs/perf/attention.md, Standing
// decisions: 80-query steps at d128).
// JAXDNN_ATTENTION_SM90_BWD_Q80_SEG=0 (read once) restores 64-query steps.
bool Q80SegEnabled() { return SwitchOn(Switch::kAttentionSm90BwdQ80Seg); }

template <int kD, bool kF16, int kStages, int kDqBufs, bool kOrdered, int kOpts>
cudaError_t LaunchFused(const AttnBwdArgs& a, cudaStream_t stream) {
  constexpr bool kQ80 = (kOpts & sm90::kFusedOptQ80) != 0;
  constexpr bool kSeg = (kOpts & sm90::kFusedOptSeg) != 0;
  using Cfg = sm90::FusedBwdConfig<kD, kStages, kDqBufs, (kOpts & sm90::kFusedOptWideSteps) != 0, kQ80, kSeg>;
  const AttnShape& s = a.shape;
  cudaError_t err;

  sm90::FusedBwdParams fp;
  sm90::BwdParams& p = fp.base;
  p.batch = static_cast<int>(s.batch);
  p.q_len = static_cast<int>(s.q_len);
  p.kv_len = static_cast<int>(s.kv_len);
  p.heads = static_cast<int>(s.heads);
  p.kv_heads = static_cast<int>(s.kv_heads);
  p.group = static_cast<int>(s.heads / s.kv_heads);
  p.causal = a.mask_params.causal ? 1 : 0;
  p.head_major = 0;
  p.scale = a.mask_params.scale;
  p.scale_log2 = a.mask_params.scale * 1.4426950408889634f;
  p.out = a.out;
  p.dout = a.dout;
  p.lse = a.lse;
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv = a.dv;
  // 64-row accumulator blocks; 80-query steps: enough for ceil(q_len / 80) * 80 rows.
  const int64_t num_m = kQ80 ? Sm90FusedBwdDqBlocks(s.q_len, kD) : (s.q_len + 63) / 64;
  fp.num_m = static_cast<int>(num_m);
  fp.q_segments = kSeg ? a.mask_params.q_segments : nullptr;
  fp.kv_segments = kSeg ? a.mask_params.kv_segments : nullptr;

  // Workspace layout (float32 elements; see Sm90FusedBwdWorkspaceElems).
  float* ws = a.workspace;
  int64_t off = 0;
  if (p.group > 1) {
    const int64_t part_elems = s.batch * s.kv_len * s.heads * s.head_dim;
    p.dk_part = ws;
    p.dv_part = ws + part_elems;
    off = 2 * part_elems;
  } else {
    p.dk_part = nullptr;
    p.dv_part = nullptr;
  }
  p.delta = ws + off;
  off += Round64(s.batch * s.heads * s.q_len);
  fp.dq_accum = ws + off;
  off += s.batch * s.heads * num_m * 64 * kD;
  fp.counters = reinterpret_cast<int*>(ws + off);
  const int64_t num_counters = s.batch * s.heads * num_m;
  // The step and key-block id ranges after the counters, sized by the
  // header's num_m (at least this num_m).
  off += Round64(s.batch * s.heads * Sm90FusedBwdDqBlocks(s.q_len, kD));
  fp.q_seg_range = kSeg ? reinterpret_cast<int2*>(ws + off) : nullptr;
  off += Round64(2 * s.batch * Sm90FusedBwdDqBlocks(s.q_len, kD));
  fp.kv_seg_range = kSeg ? reinterpret_cast<int2*>(ws + off) : nullptr;
  // 80-query steps with segments: 16-row group ranges in the last region.
  off += Round64(2 * s.batch * ((s.kv_len + 127) / 128));
  if constexpr (kSeg && kQ80) fp.q_seg_range = reinterpret_cast<int2*>(ws + off);

  // 0-1. Ordered: the semaphores zeroed (the dQ accumulator needs no zeroing:
  //    key block 0 stores, later key blocks add), then delta. Unordered (every
  //    key block adds): delta, with the accumulator zeroed in the same pass.
  //    Ordered with segments: both (key block 0 may skip a query block, so
  //    every key block adds).
  if constexpr (kOrdered) {
    err = cudaMemsetAsync(fp.counters, 0, static_cast<size_t>(num_counters) * sizeof(int), stream);
    if (err != cudaSuccess) return err;
    if constexpr (kSeg) {
      if ((err = sm90::LaunchBwdDelta<kD, kF16>(p, stream, fp.dq_accum, num_m * 64)) != cudaSuccess)
        return err;
    } else if ((err = sm90::LaunchBwdDelta<kD, kF16>(p, stream)) != cudaSuccess) {
      return err;
    }
  } else {
    if ((err = sm90::LaunchBwdDelta<kD, kF16>(p, stream, fp.dq_accum, num_m * 64)) != cudaSuccess) return err;
  }

  // 1b. Segments: each 64-query step's and 128-key block's id range (the
  //     loaders' votes, the ordered writers' ranks).
  //     80-query steps: 16-row groups instead of 64-query steps.
  if constexpr (kSeg && kQ80) {
    const int64_t steps =
        s.batch * ((s.q_len + sm90::kSegQ80GroupRows - 1) / sm90::kSegQ80GroupRows + (s.kv_len + 127) / 128);
    sm90::AttnBwdFusedSegRangeQ80Kernel<<<static_cast<unsigned>((steps + 255) / 256), 256, 0, stream>>>(fp);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  } else if constexpr (kSeg) {
    const int64_t steps = s.batch * (num_m + (s.kv_len + 127) / 128);
    sm90::AttnBwdFusedSegRangeKernel<<<static_cast<unsigned>((steps + 255) / 256), 256, 0, stream>>>(fp);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }

  // 2. Fused dK / dV / dQ.
  {
    CUtensorMap tq, tk, tv, tdo;
    if ((err = sm90::MakeBhsdTensorMap(&tq, a.q, kF16, s.batch, s.q_len, s.heads, kD, Cfg::kBlockM)) !=
        cudaSuccess)
      return err;
    if ((err = sm90::MakeBhsdTensorMap(&tdo, a.dout, kF16, s.batch, s.q_len, s.heads, kD, Cfg::kBlockM)) !=
        cudaSuccess)
      return err;
    if ((err = sm90::MakeBhsdTensorMap(&tk, a.k, kF16, s.batch, s.kv_len, s.kv_heads, kD, Cfg::kBlockN)) !=
        cudaSuccess)
      return err;
    if ((err = sm90::MakeBhsdTensorMap(&tv, a.v, kF16, s.batch, s.kv_len, s.kv_heads, kD, Cfg::kBlockN)) !=
        cudaSuccess)
      return err;
    auto kernel = sm90::AttnBwdFusedSm90Kernel<kD, kF16, kStages, kDqBufs, kOrdered, kOpts>;
    if ((err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes)) !=
        cudaSuccess) {
      return err;
    }
    // Ordered: blockIdx.y = key block: in-order dispatch puts key block n - 1
    // of a (batch, head) before key block n (the semaphore order needs it).
    // Unordered, head-major: one dimension, a (batch, head)'s key blocks adjacent.
    const int64_t nb = (s.kv_len + Cfg::kBlockN - 1) / Cfg::kBlockN;
    fp.head_major = !kOrdered && FusedHeadMajor() && nb * s.batch * s.heads <= int64_t{0x7fffffff} ? 1 : 0;
    fp.head_group = FusedHeadGroup(p.causal != 0 || kSeg, nb);
    const dim3 grid = fp.head_major
                          ? dim3(static_cast<unsigned>(nb * s.batch * s.heads))
                          : dim3(static_cast<unsigned>(s.batch * s.heads), static_cast<unsigned>(nb));
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(tq, tk, tv, tdo, fp);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }

  // 3. dQ: float32 accumulator * scale -> data type.
  {
    const int64_t total4 = s.batch * s.q_len * s.heads * kD / 4;
    const int threads = 256;
    const int64_t blocks = (total4 + threads - 1) / threads;
    // 80-query steps stage dQ with the unrotated key (Q80DqOffset).
    constexpr bool kRot = (kOpts & sm90::kFusedOptDqRot) != 0 && !kQ80;
    sm90::AttnBwdFusedDqConvertKernel<kD, kF16, kRot>
        <<<static_cast<unsigned>(blocks), threads, 0, stream>>>(fp);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }

  // 4. GQA: fixed-order sum of the group's per-query-head partials.
  if (p.group > 1) {
    const int64_t total4 = s.batch * s.kv_len * s.kv_heads * kD / 4;
    const int threads = 256;
    const int64_t blocks = (total4 + threads - 1) / threads;
    sm90::AttnBwdGroupReduceKernel<kD, kF16><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(p);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace

// The unordered (atomic) dQ mode serves calls with deterministic=False
// (self-test passed on an H200; docs/perf/attention.md, Standing decisions:
// Unordered dQ for `deterministic=False`); JAXDNN_ATTENTION_SM90_BWD_ATOMIC=0
// (read once) keeps them on the ordered mode.
bool Sm90FusedBackwardOrdered(const AttnBwdArgs& p) {
  return p.deterministic || !SwitchOn(Switch::kAttentionSm90BwdAtomic);
}

namespace {

// Segment ids (packed documents) on the fused kernel's kFusedOptSeg path
// unless JAXDNN_ATTENTION_SM90_BWD_FUSED_SEG=0 (read once), which keeps them
// on the two-kernel backward (A/Bs). Packed-document fwd+bwd 401 -> 456
// TFLOP/s GPU-busy (docs/perf/attention.md, Standing decisions: Segment ids on
// the fused kernel).
bool FusedSegEnabled() { return SwitchOn(Switch::kAttentionSm90BwdFusedSeg); }

// The masked problems the fused kernel takes: segment ids on both sides and
// nothing else (no lengths, window or softcap; causal only top-left with
// q_len == kv_len, as in the dense case).
bool FusedSegmentsOnly(const AttnBwdArgs& p) {
  const AttnMaskParams& m = p.mask_params;
  return m.q_segments != nullptr && m.kv_segments != nullptr && m.q_lengths == nullptr &&
         m.kv_lengths == nullptr && m.window_left < 0 && m.window_right < 0 && m.softcap == 0.f &&
         (!m.causal || p.shape.q_len == p.shape.kv_len);
}

}  // namespace

bool Sm90FusedBackwardSupports(const AttnBwdArgs& p) {
  const AttnShape& s = p.shape;
  if (p.workspace_elems < Sm90FusedBwdWorkspaceElems(s)) return false;
  // The fused requirement is at least the two-kernel one, so this checks the
  // same problem support (dtype, dims, masks, alignment, device).
  if (!Sm90BackwardSupports(p)) return false;
  // Head dims 64 and 128, and 96 (dense, no segment ids) under
  // JAXDNN_ATTENTION_SM90_BWD_FUSED_D96 (Sm90BackwardSupports may take 192, 256).
  const bool d96 =
      s.head_dim == 96 && SwitchOn(Switch::kAttentionSm90BwdFusedD96) && p.mask_params.q_segments == nullptr;
  if (s.head_dim != 64 && s.head_dim != 128 && !d96) return false;
  // No bias (the two-kernel backward takes it, dbias included).
  if (p.bias.data != nullptr || p.dbias != nullptr) return false;
  // Of the masked problems the fused kernel takes segment ids alone
  // (kFusedOptSeg); lengths, window, softcap and bottom-right causal stay
  // with the two-kernel backward.
  if (Sm90BackwardNeedsMasking(p) && !(FusedSegEnabled() && FusedSegmentsOnly(p))) return false;
  // The dQ conversion's grid.
  if (s.batch * s.q_len * s.heads * s.head_dim / 4 / 256 >= int64_t{0x7fffffff}) return false;
  return true;
}

// Variant bits (see attention/sm90/backward_fused.h): 1 = 3 Q/dO stages and
// 1 dQ buffer (head dim 128), 2 = sm90::kFusedOptDqFirst, 4 = kFusedOptTmaFirst,
// 8 = kFusedOptWideSteps (head dim 64; see LaunchFusedVariant), 128 =
// kFusedOptQ80 (head dim 128, unordered; see LaunchFusedVariant), 16 =
// kFusedOptQ80Diag (with 128, causal).
// kRot: 0 or sm90::kFusedOptDqRot (variant bit 32), added to every option set.
template <int kD, bool kF16, int kStages, int kDqBufs, bool kOrdered, int kRot>
cudaError_t LaunchFusedOpts(const AttnBwdArgs& p, cudaStream_t stream, int variant) {
  switch (variant & 6) {
    case 2: return LaunchFused<kD, kF16, kStages, kDqBufs, kOrdered, kRot | 2>(p, stream);
    case 4: return LaunchFused<kD, kF16, kStages, kDqBufs, kOrdered, kRot | 4>(p, stream);
    case 6: return LaunchFused<kD, kF16, kStages, kDqBufs, kOrdered, kRot | 6>(p, stream);
    default: return LaunchFused<kD, kF16, kStages, kDqBufs, kOrdered, kRot>(p, stream);
  }
}

template <bool kOrdered, bool kF16, int kRot>
LaunchStatus LaunchFusedVariant(const AttnBwdArgs& p, cudaStream_t stream, int variant) {
  const int d = static_cast<int>(p.shape.head_dim);
  if constexpr (!kOrdered) {
    const bool causal = p.mask_params.causal;
    if (d == 128 && (variant & sm90::kFusedOptQ80) && (!causal || p.shape.q_len == p.shape.kv_len)) {
      // 80-query steps: 2 Q/dO stages and 1 dQ buffer (226 KB of shared
      // memory); own step order and dQ layout (bits 1, 2, 32 ignored: the same
      // kernel for either kRot), bit 4 (TMA first) applies. Causal (top-left,
      // q_len == kv_len; the default launch only with Q80CausalEnabled): bit 16
      // starts each key block's steps at its diagonal (kFusedOptQ80Diag), else
      // at multiples of 80. The ordered mode ignores bit 128 (the 64-query
      // variant of the other bits).
      constexpr int kQ80 = sm90::kFusedOptQ80;
      constexpr int kDiag = sm90::kFusedOptQ80Diag;
      const bool diag = causal && (variant & kDiag) != 0;
      if (variant & sm90::kFusedOptTmaFirst) {
        if (diag)
          return LaunchFused<128, kF16, 2, 1, false, kQ80 | kDiag | sm90::kFusedOptTmaFirst>(p, stream);
        return LaunchFused<128, kF16, 2, 1, false, kQ80 | sm90::kFusedOptTmaFirst>(p, stream);
      }
      if (diag) return LaunchFused<128, kF16, 2, 1, false, kQ80 | kDiag>(p, stream);
      return LaunchFused<128, kF16, 2, 1, false, kQ80>(p, stream);
    }
  }
  if (d == 64 && (variant & sm90::kFusedOptWideSteps)) {
    // 128-query steps: 2 Q/dO stages and 1 dQ buffer (194 KB of shared memory;
    // a second stage or buffer does not fit). Its step order is fixed (bit 2
    // ignored); bit 4 (TMA first) applies.
    constexpr int kWide = sm90::kFusedOptWideSteps | kRot;
    if (variant & sm90::kFusedOptTmaFirst) {
      return LaunchFused<64, kF16, 2, 1, kOrdered, kWide | sm90::kFusedOptTmaFirst>(p, stream);
    }
    return LaunchFused<64, kF16, 2, 1, kOrdered, kWide>(p, stream);
  }
  if (d == 64) return LaunchFusedOpts<64, kF16, 4, 2, kOrdered, kRot>(p, stream, variant);
  if (d == 96) {
    // One build a mode: 64-query steps, 3 Q/dO stages and 1 dQ buffer (223 KB
    // of shared memory), TMA first, the rotated dQ swizzle (d128's 37 without
    // its 80-query bit); the variant bits are ignored.
    constexpr int kOpts = sm90::kFusedOptTmaFirst | sm90::kFusedOptDqRot;
    return LaunchFused<96, kF16, 3, 1, kOrdered, kOpts>(p, stream);
  }
  if (d == 128) {
    if (variant & 1) return LaunchFusedOpts<128, kF16, 3, 1, kOrdered, kRot>(p, stream, variant);
    return LaunchFusedOpts<128, kF16, 2, 2, kOrdered, kRot>(p, stream, variant);
  }
  return LaunchStatus::Refused("no fused sm90 backward is compiled for this head dim");
}

// Segment ids: 64-query steps with the TMA issued first and the rotated dQ
// swizzle (the bits of the dense defaults that apply), 2 Q/dO stages and 2
// dQ buffers at head dim 128 (3 stages leave no room for the stages' query
// ids), 4 and 2 at 64. Variant bits are ignored (all of 1, 2, 4, 32 give the
// same results; 8 and 128 have no segment path).
template <bool kOrdered, bool kF16>
LaunchStatus LaunchFusedSeg(const AttnBwdArgs& p, cudaStream_t stream) {
  constexpr int kOpts = sm90::kFusedOptSeg | sm90::kFusedOptTmaFirst | sm90::kFusedOptDqRot;
  const int d = static_cast<int>(p.shape.head_dim);
  if (d == 64) return LaunchFused<64, kF16, 4, 2, kOrdered, kOpts>(p, stream);
  if (d == 128) return LaunchFused<128, kF16, 2, 2, kOrdered, kOpts>(p, stream);
  return LaunchStatus::Refused("no fused sm90 backward with segment ids is compiled for this head dim");
}

// Segment ids with 80-query steps (variant bits 256 | 128, or the default
// launch, unless Q80SegEnabled is off): head dim 128, unordered mode, causal only
// top-left (q_len == kv_len, as FusedSegmentsOnly). One kernel for both: with
// kFusedOptQ80Diag causal calls start each key block's steps at its diagonal
// (the measured dense default, 181), non-causal ones at multiples of 80 (the
// bit has no effect there). 2 Q/dO stages, 1 dQ buffer (the dense 80-query
// layout; the stages' query ids and info words fit in the remaining 1 KB).
template <bool kF16>
cudaError_t LaunchFusedSegQ80(const AttnBwdArgs& p, cudaStream_t stream) {
  constexpr int kOpts =
      sm90::kFusedOptSeg | sm90::kFusedOptQ80 | sm90::kFusedOptQ80Diag | sm90::kFusedOptTmaFirst;
  return LaunchFused<128, kF16, 2, 1, false, kOpts>(p, stream);
}

template <bool kOrdered, bool kF16>
LaunchStatus LaunchFusedVariantRot(const AttnBwdArgs& p, cudaStream_t stream, int variant, bool q80_seg) {
  if (p.mask_params.q_segments != nullptr) {
    if constexpr (!kOrdered) {
      // q_len < 2^29: the loader's info word holds row * 4 (int32).
      if (q80_seg && p.shape.head_dim == 128 && p.shape.q_len < (int64_t{1} << 29) &&
          (!p.mask_params.causal || p.shape.q_len == p.shape.kv_len)) {
        return LaunchFusedSegQ80<kF16>(p, stream);
      }
    }
    return LaunchFusedSeg<kOrdered, kF16>(p, stream);
  }
  return (variant & sm90::kFusedOptDqRot)
             ? LaunchFusedVariant<kOrdered, kF16, sm90::kFusedOptDqRot>(p, stream, variant)
             : LaunchFusedVariant<kOrdered, kF16, 0>(p, stream, variant);
}

LaunchStatus LaunchAttentionBwdSm90FusedVariant(const AttnBwdArgs& p, cudaStream_t stream, int variant) {
  const bool ordered = Sm90FusedBackwardOrdered(p);
  // Segment ids: 80-query steps by explicit bits 256 | 128 (self-tests,
  // whatever the switch) or by the switch for the default launch.
  constexpr int kQ80Seg = sm90::kFusedOptSeg | sm90::kFusedOptQ80;
  const bool q80_seg = variant < 0 ? Q80SegEnabled() : (variant & kQ80Seg) == kQ80Seg;
  if (variant < 0) {
    variant = DefaultFusedVariant(p, ordered);
    // Causal calls keep 80-query steps unless JAXDNN_ATTENTION_SM90_BWD_Q80_CAUSAL=0.
    if (p.mask_params.causal && !Q80CausalEnabled()) variant &= ~sm90::kFusedOptQ80;
  }
  const bool f16 = p.dtype == ffi::DataType::F16;
  if (ordered) {
    return f16 ? LaunchFusedVariantRot<true, true>(p, stream, variant, q80_seg)
               : LaunchFusedVariantRot<true, false>(p, stream, variant, q80_seg);
  }
  return f16 ? LaunchFusedVariantRot<false, true>(p, stream, variant, q80_seg)
             : LaunchFusedVariantRot<false, false>(p, stream, variant, q80_seg);
}

LaunchStatus LaunchAttentionBwdSm90Fused(const AttnBwdArgs& p, cudaStream_t stream) {
  return LaunchAttentionBwdSm90FusedVariant(p, stream, -1);
}

}  // namespace jaxdnn::attention
