// Host entry points of the Hopper (sm_90a) attention backward
// (see attention/sm90/backward.cuh).
#pragma once

#include <cuda_runtime.h>

#include "attention/problem.h"
#include "common/launch_status.h"

namespace jaxdnn::attention {

// True when the sm_90a backward handles this problem: bf16/f16, head dim 64 or
// 128 (96, 192 and 256 below), no mask array or dropout, no dlse, a 16-bit
// bias at head dims 64/128 (with its dbias or without), scale > 0, 16-byte aligned
// operands, a workspace of at least batch*heads*q_len (+
// 2*batch*kv_len*heads*head_dim when heads > kv_heads) floats, and the current
// device has compute capability 9.0. Padding lengths, segment ids (both or
// neither), a sliding window, softcap (>= 0) and causal with q_len != kv_len
// (bottom-right) go through the kernels' extended path (see
// Sm90BackwardNeedsMasking) unless JAXDNN_ATTENTION_SM90_BWD_EXT=0.
// Head dims 192 and 256 (dense and masked) unless JAXDNN_ATTENTION_SM90_BWD_D256=0
// (read once; kv_len <= 65535 * 64 there); 96 and 192 unless
// JAXDNN_ATTENTION_SM90_NATIVE_DIMS=0. The fused backward refuses them.
// Note: Sm90FusedBackwardSupports builds on this check and of the masked
// cases takes segment ids alone (it checks that itself).
bool Sm90BackwardSupports(const AttnBwdArgs& p);

// Whether the problem needs the extended (masked) path: lengths, segment ids,
// a window, softcap, or causal with q_len != kv_len.
bool Sm90BackwardNeedsMasking(const AttnBwdArgs& p);

// Launches the backward on `stream` (delta pre-pass, dK/dV kernel, dQ kernel,
// and for GQA a fixed-order reduction of per-query-head dK/dV partials).
// Allocates nothing and does not synchronize (safe under CUDA graph capture).
// Deterministic: bit-identical results run to run. Callers check
// Sm90BackwardSupports first.
LaunchStatus LaunchAttentionBwdSm90(const AttnBwdArgs& p, cudaStream_t stream);

// Benchmarking hook. variant bits: 1 = dQ kernel steps over 128 keys (else
// 64); 2 = skip the dK/dV kernel (and the GQA reduction); 4 = skip the dQ
// kernel (bits 2 and 4 give incomplete gradients: timing only); 8 = head-major
// CTA order (blocks of one (batch, head) adjacent); 16 (dK/dV kernel), 32
// (dQ kernel) = the next block's S/dP gemms queue behind this block's last
// gemm. -1: default, by head dim (whole-backward medians on an H200;
// docs/perf/log.md, attention v7): D=128 -> 1 (the overlap variants are
// serialized by ptxas at D=128, C7515, and head-major order was a wash), D=64
// -> 57 (8 | 16 | 32 | 1: ~10% faster than 1 at 8x2048x16). D=256 ignores
// bits 1, 16 and 32 (32-key dQ steps, no overlap).
constexpr int kSm90BwdDefaultVariant = -1;
LaunchStatus LaunchAttentionBwdSm90Variant(const AttnBwdArgs& p, cudaStream_t stream, int variant);

}  // namespace jaxdnn::attention
