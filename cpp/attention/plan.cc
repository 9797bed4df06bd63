// The attention plan: workspace sizes and the backward's path (see plan.h).
#include "attention/plan.h"

#include <algorithm>

#include "attention/sm80/decode_split_plan.h"
#include "attention/sm90/backward_fused.h"
#include "attention/sm90/forward_workspace.h"
#include "common/switches.h"

namespace jaxdnn::attention {
namespace {

bool Is16Bit(ffi::DataType t) { return t == ffi::DataType::BF16 || t == ffi::DataType::F16; }

AttnProblem Common(const AttnShape& shape, ffi::DataType dtype, const AttnMaskParams& m,
                   const Broadcast4& bias, int32_t operands) {
  AttnProblem p;
  p.shape = shape;
  p.dtype = dtype;
  p.operands = operands;
  p.causal = m.causal;
  p.window_left = m.window_left;
  p.window_right = m.window_right;
  p.softcap = m.softcap;
  p.dropout_rate = m.dropout_rate;
  for (int i = 0; i < 4; ++i) p.bias_dims[i] = bias.dims[i];
  return p;
}

// The sm90 forward's workspace: the claim counter wherever tiles are uneven
// (causal, a window, segment ids), then the segment ranges with segment ids.
int64_t Sm90ForwardElems(const AttnProblem& p) {
  const AttnShape& s = p.shape;
  if (!Is16Bit(p.dtype) || (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256)) return 0;
  if (p.dropout_rate != 0.f || (p.operands & (kHasBias | kHasMask | kHasDropout))) return 0;
  const bool segments = (p.operands & kHasSegments) != 0;
  const bool uneven = p.causal || p.window_left >= 0 || p.window_right >= 0 || segments;
  if (!uneven) return 0;
  return kSm90TileCounterElems + (segments ? sm90::SegmentRangeInts(s.batch, s.q_len, s.kv_len) : 0);
}

// The split-KV decode forward's partials, where that path may run.
int64_t DecodeElems(const AttnProblem& p) {
  if (!SwitchOn(Switch::kAttentionDecode) || p.dropout_rate != 0.f || !Is16Bit(p.dtype)) return 0;
  if (p.operands & (kHasBias | kHasMask | kHasSegments | kHasDropout)) return 0;
  return DecodeWorkspaceElems(p.shape);
}

}  // namespace

AttnProblem ProblemOf(const AttnFwdArgs& a, int32_t operands) {
  return Common(a.shape, a.dtype, a.mask_params, a.bias, operands);
}

AttnProblem ProblemOf(const AttnBwdArgs& a, int32_t operands) {
  AttnProblem p = Common(a.shape, a.dtype, a.mask_params, a.bias, operands);
  p.deterministic = a.deterministic;
  return p;
}

bool FusedBackwardFirst(int64_t q_len, bool ordered) {
  const int64_t mode = SwitchInt(Switch::kAttentionSm90Bwd, -1);
  if (mode == 0 || mode == 1) return false;
  return mode == 2 || q_len >= (ordered ? kFusedBackwardMinQueryLen : kFusedBackwardUnorderedMinQueryLen);
}

bool FusedBackwardShapeFits(const AttnProblem& p) {
  constexpr int32_t kRefused =
      kHasBias | kHasMask | kHasQLengths | kHasKvLengths | kHasDropout | kHasDlse | kWantDbias;
  const AttnShape& s = p.shape;
  return (s.head_dim == 64 || s.head_dim == 128) && !(p.operands & kRefused) && p.softcap == 0.f &&
         p.window_left < 0 && p.window_right < 0 && (!p.causal || s.q_len == s.kv_len);
}

int64_t ForwardWorkspaceElems(const AttnProblem& p) { return std::max(Sm90ForwardElems(p), DecodeElems(p)); }

int64_t BackwardWorkspaceElems(const AttnProblem& p) {
  const AttnShape& s = p.shape;
  // delta [B, N, Sq] and per-query-head dK, dV partials [B, Sk, N, D].
  int64_t elems = s.batch * s.heads * s.q_len + 2 * s.batch * s.kv_len * s.heads * s.head_dim;
  if (p.operands & kWantDbias) {
    const int64_t* d = p.bias_dims;
    const bool full = d[0] == s.batch && d[1] == s.heads && d[2] == s.q_len && d[3] == s.kv_len;
    if (!full) elems += s.batch * s.heads * s.q_len * s.kv_len;  // the broadcast dbias staging area
  }
  const bool ordered = p.deterministic || !SwitchOn(Switch::kAttentionSm90BwdAtomic);
  if (FusedBackwardShapeFits(p) && FusedBackwardFirst(s.q_len, ordered)) {
    elems = std::max(elems, Sm90FusedBwdWorkspaceElems(s));
  }
  return std::max<int64_t>(elems, 1);
}

}  // namespace jaxdnn::attention
