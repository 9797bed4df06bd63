// Host side: the masking features of one attention call as the sm90 kernels'
// extended paths take them (FwdMaskParams), shared by the forward and
// backward launchers so both read the call the same way.
#pragma once

#include <cstdint>

#include "attention/problem.h"
#include "attention/sm90/forward_mask.cuh"

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

}  // namespace jaxdnn::attention::sm90
