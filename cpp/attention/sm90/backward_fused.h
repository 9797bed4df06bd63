// Host entry points of the fused Hopper (sm_90a) attention backward
// (dK, dV and dQ in one kernel; see attention/sm90/backward_fused.cuh).
// Checked on an H200; the default from plan.h's query-length thresholds up
// (docs/perf/attention.md, Standing decisions: Fused sm90 backward).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/problem.h"
#include "common/launch_status.h"

namespace jaxdnn::attention {

// 64-row dQ accumulator blocks per (batch, head): ceil(q_len / 64), and at
// head dim 128 enough for ceil(q_len / 80) 80-query steps too (variant bit
// 128 adds rows up to that multiple of 80: at most two more blocks).
inline int64_t Sm90FusedBwdDqBlocks(int64_t q_len, int64_t head_dim) {
  const int64_t rows = head_dim == 128 ? (q_len + 79) / 80 * 80 : q_len;
  return (rows + 63) / 64;
}

// Float32 workspace elements the fused backward needs (all regions 64-element,
// i.e. 256-byte, aligned), with num_m = Sm90FusedBwdDqBlocks(q_len, head_dim):
//   [GQA only, heads > kv_heads] dK and dV per-query-head partials: 2*B*kv_len*H*D
//   delta:                    RoundUp64(B*H*q_len)
//   dQ float32 accumulator:   B*H*num_m*64*D
//   int32 semaphores:         RoundUp64(B*H*num_m)
//   int32 (min, max) segment id per 64-query step and per 128-key block
//   (segment ids only, sized always):
//                             RoundUp64(2*B*num_m) + RoundUp64(2*B*ceil(kv_len/128))
//   int32 (min, max) segment id of the 80 queries from every multiple of 16
//   (the 80-query segment path, JAXDNN_ATTENTION_SM90_BWD_Q80_SEG; sized always):
//                             RoundUp64(2*B*ceil(q_len/16))
inline int64_t Sm90FusedBwdWorkspaceElems(const AttnShape& s) {
  auto round64 = [](int64_t x) { return (x + 63) / 64 * 64; };
  const int64_t num_m = Sm90FusedBwdDqBlocks(s.q_len, s.head_dim);
  int64_t n = round64(s.batch * s.heads * s.q_len) + s.batch * s.heads * num_m * 64 * s.head_dim +
              round64(s.batch * s.heads * num_m) + round64(2 * s.batch * num_m) +
              round64(2 * s.batch * ((s.kv_len + 127) / 128)) + round64(2 * s.batch * ((s.q_len + 15) / 16));
  if (s.heads != s.kv_heads) n += 2 * s.batch * s.kv_len * s.heads * s.head_dim;
  return n;
}

// True when the fused backward handles this problem: the support of
// Sm90BackwardSupports (bf16/f16, head dim 64/128, and 96 without segment ids
// under JAXDNN_ATTENTION_SM90_BWD_FUSED_D96, causal only with q_len ==
// kv_len, compute capability 9.0, ...) with no mask feature but segment ids
// on both sides (kFusedOptSeg; JAXDNN_ATTENTION_SM90_BWD_FUSED_SEG=0 keeps
// those on the two-kernel backward), and a workspace of at least
// Sm90FusedBwdWorkspaceElems(p.shape) floats.
bool Sm90FusedBackwardSupports(const AttnBwdArgs& p);

// Whether the launch adds dQ in key-block order (bit-identical reruns): true
// unless p.deterministic is false (the unordered mode: the accumulator is
// zeroed, every key block reduce-adds with no semaphores), which
// JAXDNN_ATTENTION_SM90_BWD_ATOMIC=0 turns off.
bool Sm90FusedBackwardOrdered(const AttnBwdArgs& p);

// Launches on `stream`: the workspace reset (ordered mode: the semaphores;
// unordered: the dQ accumulator, by cudaMemsetAsync), delta pre-pass, the
// fused dK/dV/dQ kernel, the dQ conversion, and for GQA the fixed-order
// reduction of per-query-head dK/dV partials. Allocates nothing, does not
// synchronize. Ordered mode (Sm90FusedBackwardOrdered): deterministic, the dQ
// additions into each 64-query block happen in key-block order, serialized by
// semaphores, relying on in-order CTA dispatch for forward progress (as FA3's
// deterministic backward does). Unordered mode: dQ bits may differ per run.
LaunchStatus LaunchAttentionBwdSm90Fused(const AttnBwdArgs& p, cudaStream_t stream);

// Launch with explicit step-order variant bits (A/Bs and self-tests):
//   1 = 3 Q/dO stages and 1 dQ staging buffer (head dim 128 only; else 2 and 2
//       at 128, 4 and 2 at 64),
//   2 = dQ issued before dK's second half and staged while it runs,
//   4 = the loader issues the Q/dO TMA before its lse/delta loads,
//   8 = head dim 64 only: 128-query steps (FA3's hdim64 tiling: dQ split over
//       queries, no partial-sum exchange), 2 Q/dO stages, 1 dQ buffer, its own
//       step order (bit 2 ignored, bit 4 applies: variants 8 and 12),
//   32 = the dQ staging swizzle keyed by the row rotated one bit (no 2-way
//       bank conflicts on the 8-byte staging stores),
//   128 = head dim 128, unordered mode only (ignored otherwise): 80-query
//       steps (FA3's hdim128 non-causal tiling: dQ^T = K^T dS^T), 2 Q/dO
//       stages, 1 dQ buffer, its own step order and dQ staging layout (bits
//       1, 2 and 32 ignored, bit 4 applies: variants 128 and 132; 165 = 128 |
//       37 runs as 132). Causal calls (top-left, q_len == kv_len) too:
//       steps at multiples of 80, key block n from step floor(128n / 80)
//       (docs/perf/attention.md, Standing decisions: 80-query steps at d128),
//   16 = with 128, causal only: each key block's 80-query steps start at its
//       diagonal row 128n (no rows before it; the last step's reduce-add is
//       cut at q_len): variants 144, 148; 181 = 165 | 16 runs as 148.
// Head dim 96 (JAXDNN_ATTENTION_SM90_BWD_FUSED_D96) ignores the bits: 64-query
// steps, 3 Q/dO stages, 1 dQ buffer, TMA first, rotated dQ swizzle.
// With segment ids the bits are ignored: 64-query steps, TMA first, rotated
// dQ swizzle, 2 Q/dO stages at head dim 128 (4 at 64), 2 dQ buffers; except
//   256 | 128 (e.g. 404 = 256 | 128 | 16 | 4) = head dim 128, unordered mode
//       only (ignored otherwise), segment ids: 80-query steps, from each key
//       block's diagonal when causal, at multiples of 80 when not (kOpts
//       kFusedOptSeg | kFusedOptQ80 | kFusedOptQ80Diag | kFusedOptTmaFirst
//       either way). The default launch (variant -1) takes it unless
//       JAXDNN_ATTENTION_SM90_BWD_Q80_SEG=0 (read once; 64-query steps;
//       docs/perf/attention.md, Standing decisions: 80-query steps at d128).
// Bits 1, 2, 4 and 32 give the same results bit for bit (128 sums dQ over
// other query blocks: rounding differs). -1 = the default: the
// environment's JAXDNN_ATTENTION_SM90_BWD_FUSED_VARIANT if set, else 165 at head
// dim 128 (181 when causal) and 44 at 64 in the unordered mode, 32 at 128 and 0 at 64 in the
// ordered one; then, for causal calls, bit 128 is dropped (37 runs) if
// JAXDNN_ATTENTION_SM90_BWD_Q80_CAUSAL=0 (read once): explicit variants keep
// it. (Adding dQ from registers with L2 reductions instead of staging it
// measured 0.76-0.98x variant 0 and was removed; docs/perf/attention.md,
// Standing decisions: Tried, measured and removed.)
// The variant bits above, by name (a variant is their OR), and the defaults.
enum Sm90FusedBwdVariantBits : int {
  kFusedThreeStages = 1,  // 3 Q/dO stages, 1 dQ staging buffer (head dim 128)
  kFusedDqFirst = 2,      // dQ issued before dK's second half
  kFusedTmaFirst = 4,     // Q/dO TMA before the lse/delta loads
  kFusedWideSteps = 8,    // head dim 64: 128-query steps
  kFusedQ80Diag = 16,     // with kFusedQ80, causal: steps from each key block's diagonal
  kFusedDqRot = 32,       // rotated dQ staging swizzle
  kFusedQ80 = 128,        // head dim 128, unordered: 80-query steps
  kFusedQ80Seg = 256,     // with kFusedQ80: segment ids on 80-query steps
};
constexpr int kFusedD128Default = kFusedThreeStages | kFusedTmaFirst | kFusedDqRot;  // 37
constexpr int kFusedD128Q80 = kFusedD128Default | kFusedQ80;                         // 165
constexpr int kFusedD128Q80Causal = kFusedD128Q80 | kFusedQ80Diag;                   // 181
constexpr int kFusedD64Wide = kFusedWideSteps | kFusedTmaFirst | kFusedDqRot;        // 44
constexpr int kFusedD128Ordered = kFusedDqRot;                                       // 32

LaunchStatus LaunchAttentionBwdSm90FusedVariant(const AttnBwdArgs& p, cudaStream_t stream, int variant);

}  // namespace jaxdnn::attention
