// Host side: the masking features of one attention call as the sm90 kernels'
// extended paths take them (FwdMaskParams), shared by the forward and
// backward launchers so both read the call the same way.
#pragma once

#include <cstdint>

#include "attention/problem.h"
#include "attention/sm90/forward_bias.cuh"
#include "attention/sm90/forward_mask.cuh"
#include "common/switches.h"

namespace jaxdnn::attention::sm90 {

// Lengths and segment ids as given (segments only when both sides have them);
// a window at least as wide as any diagonal distance is no window (which also
// keeps diag +- window inside int range in the kernels); softcap c with its
// c * tanh(raw * scale / c) scale. The launchers set their own scale terms.
inline FwdMaskParams MakeSm90MaskParams(const AttnMaskParams& m, const AttnShape& s) {
  FwdMaskParams out;
  out.q_lengths = m.q_lengths;
  out.kv_lengths = m.kv_lengths;
  if (m.q_segments != nullptr && m.kv_segments != nullptr) {
    out.q_segments = m.q_segments;
    out.kv_segments = m.kv_segments;
  }
  const int64_t span = s.q_len + s.kv_len;
  out.window_left = (m.window_left < 0 || m.window_left >= span) ? -1 : static_cast<int>(m.window_left);
  out.window_right = (m.window_right < 0 || m.window_right >= span) ? -1 : static_cast<int>(m.window_right);
  if (m.softcap > 0.f) {
    out.softcap = m.softcap;
    out.softcap_scale = m.scale / m.softcap;
  }
  return out;
}

// Whether a bias is one the sm90 kernels' bias stages take: 16-bit, keys
// contiguous (broadcast over any of batch, heads and query rows).
inline bool Sm90BiasFits(const Broadcast4& b, ffi::DataType dtype, const AttnShape& s) {
  return (dtype == ffi::DataType::BF16 || dtype == ffi::DataType::F16) && (b.stride_s == 1 || s.kv_len == 1);
}

// The bias as the kernels read it: its copy granularity from the alignment
// of every row start, and the scale the raw scores take before the bias is
// added (1 with softcap, which is applied before the bias).
inline FwdBiasParams MakeSm90BiasParams(const Broadcast4& b, ffi::DataType dtype, const AttnMaskParams& m) {
  FwdBiasParams out;
  out.data = b.data;
  out.stride_b = b.dims[0] == 1 ? 0 : b.stride_b;
  out.stride_h = b.dims[1] == 1 ? 0 : b.stride_h;
  out.stride_t = b.dims[2] == 1 ? 0 : b.stride_t;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(b.data);
  auto aligned = [&](int elems) {
    return addr % (2 * elems) == 0 && out.stride_b % elems == 0 && out.stride_h % elems == 0 &&
           out.stride_t % elems == 0;
  };
  out.copy_bytes = aligned(8) ? 16 : aligned(2) ? 4 : 2;
  out.f16 = dtype == ffi::DataType::F16 ? 1 : 0;
  out.mul = m.softcap > 0.f ? 1.f : m.scale;
  out.row_broadcast = out.stride_t == 0 && SwitchOn(Switch::kAttentionSm90BiasRowStage) ? 1 : 0;
  return out;
}

}  // namespace jaxdnn::attention::sm90
