// The attention family's plan, made in C++ from the problem alone (shapes,
// dtype, flags, switches): which backward path a call takes, and how many
// float32 elements of workspace XLA must give each direction on CUDA. The
// CUDA handlers refuse a smaller workspace, and Python asks the same
// functions through the extension's plan queries, so the two cannot drift.
#pragma once

#include <cstdint>

#include "attention/problem.h"

namespace jaxdnn::attention {

// What decides the plan: the call's shapes and attributes, no data.
struct AttnProblem {
  AttnShape shape;
  ffi::DataType dtype = ffi::DataType::BF16;
  int32_t operands = 0;  // OperandBits
  bool causal = false;
  int32_t window_left = -1, window_right = -1;
  float softcap = 0.f, dropout_rate = 0.f;
  bool deterministic = true;
  bool scale_positive = true;           // scale > 0 (the Hopper backward's condition)
  int64_t bias_dims[4] = {1, 1, 1, 1};  // with kHasBias
};

AttnProblem ProblemOf(const AttnFwdArgs& p, int32_t operands);
AttnProblem ProblemOf(const AttnBwdArgs& p, int32_t operands);
// The operand bits a backward call's buffers carry.
int32_t OperandsOf(const AttnBwdArgs& p);

// Whether the two-kernel Hopper backward takes the problem by its shapes,
// flags and switches (sm90::Sm90BackwardSupports adds the buffers'
// alignment, the workspace and the device); the fused one takes a subset.
bool Sm90BackwardShapeFits(const AttnProblem& p);

// From this many query rows up the CUDA backward takes the fused Hopper
// kernel. Ordered dQ (deterministic=True) wins from 8192 rows (3-9% through
// jax; the two-kernel one is faster below); unordered dQ from 512 (fwd+bwd
// 3-14% at seq 512-1024, head dims 64 and 128); below 512 unmeasured.
// Evidence: docs/perf/attention.md.
constexpr int64_t kFusedBackwardMinQueryLen = 8192;
constexpr int64_t kFusedBackwardUnorderedMinQueryLen = 512;

// Whether the fused sm90 backward is tried before the two-kernel one, by the
// size rule above and JAXDNN_ATTENTION_SM90_BWD (0/1 never, 2 always).
bool FusedBackwardFirst(int64_t q_len, bool ordered);

// Whether the fused kernel can take the problem at all (dense or segment ids
// only, head dim 64/128, causal only with q_len == kv_len, no softcap or window).
bool FusedBackwardShapeFits(const AttnProblem& p);

// Whether the forward runs head dim 96 or 192 on its own sm90 kernel rather
// than zero-padded to 128 or 256 (Python pads the operands otherwise): a
// 16-bit problem with no bias, mask or dropout that the sm90 forward's shape
// rules take and the split-KV decode would not, unless
// JAXDNN_ATTENTION_SM90_NATIVE_DIMS=0, on a compute capability 9.0 device
// current at trace time (an unpadded executable runs on sm90 only). Plan
// query "attention_fwd_native_head_dim".
bool ForwardNativeHeadDim(const AttnProblem& p);

// Whether the forward runs value at a head dim of its own (MLA: 192/128,
// and 128/64 under JAXDNN_ATTENTION_SM90_VALUE_DIM_64=1) rather than
// zero-padded to the query's: ForwardNativeHeadDim's rules at the query's
// head dim, the dense case (causal only with q_len == kv_len; no lengths,
// segments, window or softcap), unless JAXDNN_ATTENTION_SM90_NATIVE_VALUE_DIM=0.
// The launch applies the same rule (Sm90ForwardValueDimFits). Plan query
// "attention_fwd_native_value_dim".
bool ForwardNativeValueDim(const AttnProblem& p);
// The same for the backward: head dims 96 and 192 where the two-kernel sm90 backward
// takes the problem (Sm90BackwardShapeFits; not with dlse, a bias or a
// mask), on a compute capability 9.0 device. Plan query
// "attention_bwd_native_head_dim".
bool BackwardNativeHeadDim(const AttnProblem& p);

// Whether the API sends a boolean mask to the sm90 bias kernels as an
// additive bias of 0 / -inf (the oracle's own rule: a -inf logit is a masked
// pair) rather than to the mma.sync kernels, which alone take a mask array:
// p describes the call with that bias in the mask's place (bias_dims its
// broadcast shape). Where the sm90 forward and backward take a 16-bit bias:
// head dims 64 and 128, keys contiguous, no softcap or dropout, unless
// JAXDNN_ATTENTION_SM90_MASK_AS_BIAS=0, on a compute capability 9.0 device.
// The backward then writes no dbias unless a bias of the caller's was
// summed in. Plan query "attention_mask_as_bias".
bool MaskAsBias(const AttnProblem& p);

// float32 workspace elements of each direction on CUDA (0: none). The
// backward's is sized to the kernel the problem takes: the Hopper kernels
// need delta (and dK/dV partials with grouped heads), the sm80 fallback
// always the partials (and a broadcast dbias's staging area).
int64_t ForwardWorkspaceElems(const AttnProblem& p);
int64_t BackwardWorkspaceElems(const AttnProblem& p);
// What the sm80 backward needs, for the handler's check when a call the plan
// sized for the Hopper kernels falls back to it.
int64_t Sm80BackwardWorkspaceElems(const AttnProblem& p);

}  // namespace jaxdnn::attention
