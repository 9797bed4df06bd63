// Host entry points of the split-KV decode forward (flash-decoding style):
// for a few query tokens over a long key/value cache, the key/value length is
// split across CTAs (phase 1, attention/sm80/decode_split.cuh) and the partials
// merged in a fixed order (phase 2, attention/sm80/decode_combine.cuh), so that
// small batches still spread over every SM. ("decode" here is the generation
// step; attention/call_frame.cc decodes the FFI call frame, a different thing.)
#pragma once

#include <cuda_runtime.h>

#include "attention/problem.h"
#include "common/launch_status.h"
#include "attention/sm80/decode_split_plan.h"

namespace jaxdnn::attention {

// Whether the kernels take this problem at all, whatever its size: bf16/f16,
// head dim 64/128/256, q_len <= kDecodeMaxQueryLen, GQA (kv heads divide
// heads), no bias, mask, dropout or segment ids (padding lengths, causal,
// window and softcap are fine), 16-byte aligned q/k/v/out, grid within limits.
bool DecodeSplitKernelTakes(const AttnFwdArgs& p);

// The gate the forward uses: DecodeSplitKernelTakes, splitting pays
// (DecodeSplitShapeFits) and the workspace the FFI call brought is at least
// DecodeWorkspaceElems.
bool DecodeSplitSupports(const AttnFwdArgs& p);

// Launches both phases on `stream` with `plan` (MakeDecodeSplitPlan unless a
// test forces another split count), using p.workspace, which must hold
// DecodeWorkspaceElemsForPlan(p.shape, plan) floats. Allocates nothing and does
// not synchronize (safe under graph capture); every launch is checked.
LaunchStatus LaunchAttentionFwdDecodeSplit(const AttnFwdArgs& p, const DecodeSplitPlan& plan,
                                           cudaStream_t stream);

// `plan` with its split count lowered, where that fills the GPU's waves of
// phase-1 CTAs better (SMs x resident CTAs per SM, from the occupancy query
// for this problem's kernel): the most CTAs per resident slot over whole
// waves, the larger split count on ties. Never more splits (nor workspace)
// than `plan`. Host queries only: graph-capture safe.
LaunchStatus FitDecodeSplitPlanToWaves(const AttnFwdArgs& p, const DecodeSplitPlan& plan,
                                       DecodeSplitPlan* fitted);

// paged_attention's decode over a paged pool (p.paged on): the same kernels
// with the plan fitted to the waves, whether or not splitting pays.
// p.workspace must hold PagedDecodeWorkspaceElems(p.shape) floats.
LaunchStatus LaunchPagedDecode(const AttnFwdArgs& p, cudaStream_t stream);

// The plan for this shape with a given number of splits (the chunk rounded up
// to kDecodeChunkAlign keys; the split count may come out smaller): for tests.
DecodeSplitPlan DecodeSplitPlanWithSplits(const AttnShape& s, int64_t splits);

}  // namespace jaxdnn::attention
