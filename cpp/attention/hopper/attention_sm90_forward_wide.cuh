// The Hopper attention forward with 176-key blocks at head dim 128 (dense,
// non-causal only): an A/B variant, OFF by default (the launcher takes it only
// with JAXDNN_ATTENTION_SM90_FWD_WIDE=1). Compiled only, not yet run on a GPU.
//
// Why: per FLOP, 176-key blocks mean 11/8 fewer softmax/rescale/barrier steps
// and longer wgmmas than 128-key blocks (the FlashAttention-3 choice for this
// shape). The kernel is AttnFwdSm90Tiles with FwdConfig<128, 176>:
//   S = Q K^T by m64n176k16 (8 k-steps over the head dim), O += P V by
//   m64n128k16 over 11 k-steps of 16 keys with P from registers; the K/V TMA
//   box is 176 rows. Partial last blocks (kv_len % 176 != 0): TMA zero-fills
//   the rows past kv_len and the first (highest) block is masked, as at 128.
//   Registers per consumer thread: S 88 + P 44 + O 64 live together while the
//   next S gemm overlaps this block's P.V gemm; within the 240 of setmaxnreg.
//   Shared memory: Q 32 KB + 2 x (K 44 KB + V 44 KB) = 208 KB, no room for a
//   separate O buffer, so O is staged in Q's buffer (FwdConfig::kOInQ, as at
//   head dim 256): a persistent CTA's next Q load waits for the epilogue.
// Causal is not supported: 128-row query tiles do not align with 176-key
// blocks (FwdConfig::kCausalOk); neither is the extended path.
#pragma once

#include "attention/hopper/attention_sm90_forward.cuh"

namespace jaxdnn::attention::sm90 {

using FwdWideConfig = FwdConfig<128, 176>;

template <bool kF16, bool kPingpong, bool kPersistent>
__global__ void __launch_bounds__(384, 1)
    AttnFwdSm90WideKernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_v, const FwdParams p) {
  AttnFwdSm90Tiles<FwdWideConfig, kF16, kPingpong, kPersistent, false>(tm_q, tm_k, tm_v, p);
}

}  // namespace jaxdnn::attention::sm90
