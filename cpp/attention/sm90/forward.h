// Host entry points of the Hopper (sm_90a) attention forward.
#pragma once

#include <cuda_runtime.h>

#include "attention/problem.h"
#include "common/launch_status.h"

namespace jaxdnn::attention {

// True when the sm_90a kernel handles this problem: bf16/f16, head dim 64,
// 128 or 256 (96 and 192 without a bias), no mask/dropout,
// scale > 0, 16-byte aligned operands, and the current device has compute
// capability 9.0; and either the dense case (no
// lengths/segments/softcap/window, causal only with q_len == kv_len) or, unless
// the environment variable JAXDNN_ATTENTION_SM90_EXT=0 is set (read once), the
// extended cases: q/kv padding lengths, causal with q_len != kv_len
// (bottom-right when q_len < kv_len, per attention/mask.h), a sliding window,
// softcap and segment ids (checked on an H200 by
// tests/cuda/attention/sm90_attention_ext_selftest.cu and through jax).
bool Sm90ForwardSupports(const AttnFwdArgs& p);

// True when a value head dim of its own (p.shape.value_dim, MLA) runs on the
// sm_90a forward: query/key 192 over value 128 (unless _NATIVE_DIMS=0), or
// 128 over 64 under JAXDNN_ATTENTION_SM90_VALUE_DIM_64=1; dense (causal only
// with q_len == kv_len), no bias, mask or dropout; unless
// JAXDNN_ATTENTION_SM90_NATIVE_VALUE_DIM=0.
bool Sm90ForwardValueDimFits(const AttnFwdArgs& p);

// Launches the forward on `stream`. Allocates nothing and does not synchronize
// (safe under CUDA graph capture; the dynamic scheduler zeroes its counter in
// p.workspace with cudaMemsetAsync). Callers check Sm90ForwardSupports first.
LaunchStatus LaunchAttentionFwdSm90(const AttnFwdArgs& p, cudaStream_t stream);

// Benchmarking hook: variant = pingpong + 2 * persistent (+ 4: force the
// extended kernel path even for a dense problem; a problem that needs it gets
// it anyway), i.e.
//   0: intra-warpgroup overlap only, one CTA per tile
//   1: + pingpong scheduling of the two consumer warpgroups
//   2: persistent CTAs (one per SM) without pingpong, 3: persistent + pingpong
//   8 (+4 ext; bits 0-1 ignored): the dynamic tile scheduler (persistent CTAs
//     with pingpong, tiles claimed through an atomic counter): needs
//     p.workspace (>= 1 element; its first 4 bytes are the counter, zeroed by
//     the launcher with cudaMemsetAsync), else a refusal saying so.
//     + 16: with (batch, head) pairs in chunks whose K/V fill about half the
//     L2, longest query tile first across each chunk (A/B order).
//   + 32 (with 0-3): 80-key kv blocks at head dim 256 (m64n80k16 scores,
//     224 KB of tiles) for dense non-causal problems; ignored (64-key
//     blocks) when causal, extended, dynamic (bit 8) or another head dim.
//   + 128 (with 3 or 35): clusters of two CTAs on neighbouring query tiles of
//     one (batch, head), each loading half of every K/V block for both (TMA
//     multicast): dense non-causal problems at head dims 128 and 256 with an
//     even number of 128-row query tiles per (batch, head); ignored otherwise.
//  -1 (the default): 3 when not causal, 1 when causal (the static persistent
//   schedule balances causal tiles badly). Measured on H200, bf16, D=128.
//   Extended cases: 1 with causal, a window or segments, else 3 (not tuned).
//   With JAXDNN_ATTENTION_SM90_DYNAMIC=1 (read once) and a workspace, the
//   uneven cases (causal, window, segment ids) take 8 + 1 instead of 1
//   (=lpt: 16 + 8 + 1). Unset, given a workspace: below head dim 256,
//   segments, windows and causal up to 8192 keys take 16 + 8 + 1, dense
//   head dim 128 causal over more keys 8 + 1 (DefaultDynamicBits).
//   Head dim 128 dense non-causal problems with an even number of query
//   tiles per (batch, head) take 3 + 128 (clusters; JAXDNN_ATTENTION_SM90_CLUSTER=0
//   keeps 3, =1 also clusters head dim 256).
//   Head dim 256 dense non-causal problems take 3 + 32 (80-key blocks);
//   JAXDNN_ATTENTION_SM90_D256_BLOCKN=64 (read once) keeps them on 3.
constexpr int kSm90DefaultVariant = -1;
// The variant bits above, by name (a variant is their OR).
enum Sm90FwdVariantBits : int {
  kFwdPingpong = 1,         // pingpong scheduling of the consumer warpgroups
  kFwdPersistent = 2,       // persistent CTAs, one per SM
  kFwdForceExt = 4,         // the extended (masked) kernel path even when dense
  kFwdDynamic = 8,          // the dynamic tile scheduler (persistent, pingpong)
  kFwdLptOrder = 16,        // with kFwdDynamic: L2-chunked longest-first order
  kFwdBlockN80 = 32,        // head dim 256: 80-key blocks
  kFwdThreeConsumers = 64,  // head dim 64: three consumer warpgroups (192-row tiles)
  kFwdCluster = 128,        // clusters of two CTAs sharing K/V (TMA multicast)
};
LaunchStatus LaunchAttentionFwdSm90Variant(const AttnFwdArgs& p, cudaStream_t stream, int variant);

}  // namespace jaxdnn::attention
