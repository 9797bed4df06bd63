// The attention plan: workspace sizes and the backward's path (see plan.h).
#include "attention/plan.h"

#include <algorithm>

#include "attention/sm80/decode_split_plan.h"
#include "attention/sm90/backward_fused.h"
#include "attention/sm90/forward_workspace.h"
#include "common/sm90/tma_desc.h"
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
  p.scale_positive = m.scale > 0.f;
  for (int i = 0; i < 4; ++i) p.bias_dims[i] = bias.dims[i];
  return p;
}

// The sm90 forward's workspace: the claim counter wherever tiles are uneven
// (causal, a window, segment ids), then the segment ranges with segment ids.
int64_t Sm90ForwardElems(const AttnProblem& p) {
  const AttnShape& s = p.shape;
  if (!Is16Bit(p.dtype) ||
      (s.head_dim != 64 && s.head_dim != 96 && s.head_dim != 128 && s.head_dim != 192 && s.head_dim != 256)) {
    return 0;
  }
  // (A bias rides on the extended path, which needs the segment ranges too.)
  if (p.dropout_rate != 0.f || (p.operands & (kHasMask | kHasDropout))) return 0;
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
  // Head dim 96 under JAXDNN_ATTENTION_SM90_BWD_FUSED_D96 (dense only: no
  // segment path at 96).
  const bool d96 = s.head_dim == 96 && SwitchOn(Switch::kAttentionSm90BwdFusedD96) &&
                   SwitchOn(Switch::kAttentionSm90NativeDims) && !(p.operands & kHasSegments);
  return (s.head_dim == 64 || s.head_dim == 128 || d96) && !(p.operands & kRefused) && p.softcap == 0.f &&
         p.window_left < 0 && p.window_right < 0 && (!p.causal || s.q_len == s.kv_len);
}

namespace {

// The sm90 forward's rules for a problem the mma.sync and decode kernels
// cannot take (a head dim or value head dim of its own), whose padded form
// (head dim `padded_dim`) would otherwise run: Sm90ForwardSupports's shape
// rules, and no short query the padded decode kernels serve.
bool Sm90OnlyForwardFits(const AttnProblem& p, int64_t padded_dim) {
  const AttnShape& s = p.shape;
  if (!SwitchOn(Switch::kAttentionSm90)) return false;
  if (!Is16Bit(p.dtype) || !p.scale_positive) return false;
  if (p.dropout_rate != 0.f || (p.operands & (kHasBias | kHasMask | kHasDropout))) return false;
  // The shape rules of Sm90ForwardSupports (attention/sm90/forward.cu), which
  // the launch applies with the buffers: a problem it refuses would reach the
  // mma.sync forward, which has no 96 / 192 build.
  if (s.batch < 1 || s.q_len < 1 || s.kv_len < 1 || s.heads < 1 || s.kv_heads < 1) return false;
  if (s.heads % s.kv_heads != 0) return false;
  if (s.q_len > (int64_t{1} << 30) || s.kv_len > (int64_t{1} << 30) ||
      (s.q_len + 127) / 128 * s.heads * s.batch > int64_t{0x7fffffff}) {
    return false;
  }
  const bool masked = (p.operands & (kHasQLengths | kHasKvLengths | kHasSegments)) != 0 ||
                      p.window_left >= 0 || p.window_right >= 0 || p.softcap != 0.f ||
                      (p.causal && s.q_len != s.kv_len);
  if (masked && !SwitchOn(Switch::kAttentionSm90Ext)) return false;
  AttnShape padded = s;
  padded.head_dim = padded_dim;
  padded.value_dim = 0;
  if (SwitchOn(Switch::kAttentionDecode) && !(p.operands & kHasSegments) && DecodeSplitShapeFits(padded)) {
    return false;  // the padded decode kernels serve short queries
  }
  return jaxdnn::sm90::Sm90DeviceReady(-1);
}

}  // namespace

bool ForwardNativeHeadDim(const AttnProblem& p) {
  const int64_t d = p.shape.head_dim;
  if ((d != 96 && d != 192) || !SwitchOn(Switch::kAttentionSm90NativeDims)) return false;
  return Sm90OnlyForwardFits(p, d == 96 ? 128 : 256);
}

bool ForwardNativeValueDim(const AttnProblem& p) {
  const AttnShape& s = p.shape;
  const bool mla192 = s.head_dim == 192 && s.vdim() == 128;
  const bool mla128 = s.head_dim == 128 && s.vdim() == 64 && SwitchOn(Switch::kAttentionSm90ValueDim64);
  if (!(mla192 || mla128) || !SwitchOn(Switch::kAttentionSm90NativeValueDim)) return false;
  const bool masked = (p.operands & (kHasQLengths | kHasKvLengths | kHasSegments)) != 0 ||
                      p.window_left >= 0 || p.window_right >= 0 || p.softcap != 0.f ||
                      (p.causal && s.q_len != s.kv_len);
  if (masked) return false;
  return mla192 ? ForwardNativeHeadDim(p) : Sm90OnlyForwardFits(p, 128);
}

bool BackwardNativeHeadDim(const AttnProblem& p) {
  const int64_t d = p.shape.head_dim;
  if ((d != 96 && d != 192) || SwitchInt(Switch::kAttentionSm90Bwd, -1) == 0) return false;
  if (!Sm90BackwardShapeFits(p)) return false;
  return jaxdnn::sm90::Sm90DeviceReady(-1);
}

bool MaskAsBias(const AttnProblem& p) {
  const AttnShape& s = p.shape;
  if (!SwitchOn(Switch::kAttentionSm90MaskAsBias) || !SwitchOn(Switch::kAttentionSm90) ||
      !SwitchOn(Switch::kAttentionSm90Bias) || !SwitchOn(Switch::kAttentionSm90Ext)) {
    return false;
  }
  if (!Is16Bit(p.dtype) || !p.scale_positive || (s.head_dim != 64 && s.head_dim != 128)) return false;
  if (p.softcap != 0.f || p.dropout_rate != 0.f || (p.operands & kHasDropout)) return false;
  // The bias stages copy whole key rows (Sm90BiasFits: keys contiguous).
  if (p.bias_dims[3] != s.kv_len && s.kv_len != 1) return false;
  if (s.q_len > (int64_t{1} << 30) || s.kv_len > (int64_t{1} << 30)) return false;
  return jaxdnn::sm90::Sm90DeviceReady(-1);
}

int64_t ForwardWorkspaceElems(const AttnProblem& p) { return std::max(Sm90ForwardElems(p), DecodeElems(p)); }

int32_t OperandsOf(const AttnBwdArgs& a) {
  const AttnMaskParams& m = a.mask_params;
  int32_t o = 0;
  if (a.bias.data != nullptr) o |= kHasBias;
  if (a.mask.data != nullptr) o |= kHasMask;
  if (m.q_lengths != nullptr) o |= kHasQLengths;
  if (m.kv_lengths != nullptr) o |= kHasKvLengths;
  if (m.q_segments != nullptr || m.kv_segments != nullptr) o |= kHasSegments;
  if (m.dropout_rate != 0.f || m.seeds != nullptr) o |= kHasDropout;
  if (a.dlse != nullptr) o |= kHasDlse;
  if (a.dbias != nullptr) o |= kWantDbias;
  return o;
}

bool Sm90BackwardShapeFits(const AttnProblem& p) {
  const AttnShape& s = p.shape;
  if (!Is16Bit(p.dtype)) return false;
  // Head dim 256 (attention/sm90/backward_dkdv_wide.cuh, the dQ kernel at
  // 32-key steps) is on unless JAXDNN_ATTENTION_SM90_BWD_D256=0, which keeps
  // the mma.sync backward (docs/perf/attention.md, Standing decisions: d256
  // on the two-kernel sm90 backward). Head dims 96 and 192 (native, unless
  // JAXDNN_ATTENTION_SM90_NATIVE_DIMS=0; 192 on the 256 kernels' plan, so
  // under both switches).
  const bool native = SwitchOn(Switch::kAttentionSm90NativeDims);
  const bool d256 = s.head_dim == 256 && SwitchOn(Switch::kAttentionSm90BwdD256);
  const bool d192 = s.head_dim == 192 && native && SwitchOn(Switch::kAttentionSm90BwdD256);
  const bool d96 = s.head_dim == 96 && native;
  if (s.head_dim != 64 && s.head_dim != 128 && !d256 && !d192 && !d96) return false;
  if (s.batch < 1 || s.q_len < 1 || s.kv_len < 1 || s.heads < 1 || s.kv_heads < 1) return false;
  if (s.heads % s.kv_heads != 0) return false;
  // Grid limits: x = batch * heads < 2^31, y = blocks along a sequence < 65536.
  if (s.batch * s.heads * ((std::max(s.q_len, s.kv_len) + 63) / 64) > int64_t{0x7fffffff}) return false;
  if ((s.q_len + 127) / 128 > 65535 || (s.kv_len + 127) / 128 > 65535) return false;
  if (s.head_dim >= 192 && (s.kv_len + 63) / 64 > 65535) return false;  // their 64-key dK/dV blocks
  if (s.batch * s.q_len * s.heads * 32 / 256 > int64_t{0x7fffffff}) return false;
  if (p.operands & (kHasMask | kHasDlse | kHasDropout)) return false;
  if ((p.operands & (kHasBias | kWantDbias)) != 0) {
    // A bias, with its gradient or without (a boolean mask sent as 0 / -inf)
    // (attention/sm90/backward_bias.cuh): head dims 64 and 128, no softcap;
    // its dtype and layout are checked at launch (Sm90BackwardSupports),
    // which falls back to the mma.sync backward.
    if (!(p.operands & kHasBias)) return false;
    if (!SwitchOn(Switch::kAttentionSm90Bias) || s.head_dim > 128 || s.head_dim == 96 || p.softcap != 0.f) {
      return false;
    }
  }
  if (p.dropout_rate != 0.f || !p.scale_positive) return false;
  const bool masked = (p.operands & (kHasQLengths | kHasKvLengths | kHasSegments)) || p.window_left >= 0 ||
                      p.window_right >= 0 || p.softcap != 0.f || (p.causal && s.q_len != s.kv_len);
  if (masked) {
    // The kernels' extended path: lengths, segments, window, softcap, causal
    // with q_len != kv_len; JAXDNN_ATTENTION_SM90_BWD_EXT=0 sends these back
    // to the mma.sync backward (A/B timing, or a way out).
    if (!SwitchOn(Switch::kAttentionSm90BwdExt)) return false;
    if (s.q_len > (int64_t{1} << 30) || s.kv_len > (int64_t{1} << 30)) return false;
  }
  return true;
}

int64_t Sm80BackwardWorkspaceElems(const AttnProblem& p) {
  const AttnShape& s = p.shape;
  // delta [B, N, Sq] and per-query-head dK, dV partials [B, Sk, N, D].
  int64_t elems = s.batch * s.heads * s.q_len + 2 * s.batch * s.kv_len * s.heads * s.head_dim;
  if (p.operands & kWantDbias) {
    const int64_t* d = p.bias_dims;
    const bool full = d[0] == s.batch && d[1] == s.heads && d[2] == s.q_len && d[3] == s.kv_len;
    if (!full) elems += s.batch * s.heads * s.q_len * s.kv_len;  // the broadcast dbias staging area
  }
  return elems;
}

int64_t BackwardWorkspaceElems(const AttnProblem& p) {
  const AttnShape& s = p.shape;
  int64_t elems;
  if (SwitchInt(Switch::kAttentionSm90Bwd, -1) != 0 && Sm90BackwardShapeFits(p)) {
    // delta [B, N, Sq], and the dK/dV partials only with grouped heads.
    elems = s.batch * s.heads * s.q_len;
    if (s.heads != s.kv_heads) elems += 2 * s.batch * s.kv_len * s.heads * s.head_dim;
    if (p.operands & kWantDbias) {
      // A broadcast bias: its dbias staging area or the chained sums'
      // progress counters (sm90/backward.cu, DbiasMode), 16-byte aligned
      // after the rest.
      const int64_t* d = p.bias_dims;
      const bool full = d[0] == s.batch && d[1] == s.heads && d[2] == s.q_len && d[3] == s.kv_len;
      const int64_t progress = s.batch * s.heads * ((s.q_len + 127) / 128) * 8;
      if (!full) elems = (elems + 3) / 4 * 4 + std::max(s.batch * s.heads * s.q_len * s.kv_len, progress);
    }
    // A bias, with its gradient or without (a mask sent as one): room for the
    // mma.sync backward the launch falls back to where the sm90 one refuses
    // what the plan cannot see (a float32 bias is only known at launch).
    if (p.operands & kHasBias) elems = std::max(elems, Sm80BackwardWorkspaceElems(p));
  } else {
    elems = Sm80BackwardWorkspaceElems(p);
  }
  const bool ordered = p.deterministic || !SwitchOn(Switch::kAttentionSm90BwdAtomic);
  if (FusedBackwardShapeFits(p) && FusedBackwardFirst(s.q_len, ordered)) {
    elems = std::max(elems, Sm90FusedBwdWorkspaceElems(s));
  }
  return std::max<int64_t>(elems, 1);
}

}  // namespace jaxdnn::attention
