// Host entry points of the Hopper (sm_90a) attention forward.
#pragma once

#include <cuda_runtime.h>

#include "attention/attention_problem.h"

namespace jaxdnn::attention {

// True when the sm_90a kernel handles this problem: bf16/f16, head dim 64 or
// 128, no bias/mask/lengths/segments/softcap/dropout/window, scale > 0,
// causal only with q_len == kv_len, 16-byte aligned operands, and the current
// device has compute capability 9.0.
bool Sm90ForwardSupports(const AttnFwdArgs& p);

// Launches the forward on `stream`. Allocates nothing and does not synchronize
// (safe under CUDA graph capture). Callers check Sm90ForwardSupports first.
cudaError_t LaunchAttentionFwdSm90(const AttnFwdArgs& p, cudaStream_t stream);

// Benchmarking hook: variant = pingpong + 2 * persistent, i.e.
//   0: intra-warpgroup overlap only, one CTA per tile
//   1: + pingpong scheduling of the two consumer warpgroups
//   2: persistent CTAs (one per SM) without pingpong, 3: persistent + pingpong
//  -1 (the default): 3 when not causal, 1 when causal (the static persistent
//   schedule balances causal tiles badly). Measured on H200, bf16, D=128.
constexpr int kSm90DefaultVariant = -1;
cudaError_t LaunchAttentionFwdSm90Variant(const AttnFwdArgs& p, cudaStream_t stream, int variant);

}  // namespace jaxdnn::attention
