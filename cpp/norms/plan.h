// The norm family's plan, made in C++ from the problem alone: how many blocks
// split each group's rows in the CUDA backward, which sizes its workspace
// (float32 [groups, partials, 2, dim]). The handler checks the workspace XLA
// gives against it, and Python asks the same function (plan query
// "norm_bwd_partials") to size that workspace.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/switches.h"
#include "norms/problem.h"
#include "norms/sm80/norm_config.h"

namespace jaxdnn::norms {

// JAXDNN_NORM_BWD=stream: every backward whose partials fit runs the stream
// kernel (A/Bs); the plan and the launcher both ask.
inline bool BwdStreamForced() { return SwitchText(Switch::kNormBwd) == "stream"; }

struct NormBwdPlan {
  int64_t partials = 1;  // blocks per group, each writing a float32 partial row (2 * dim)
};

// One wave on a Hopper GPU (132 SMs): two blocks per SM while a row is at
// most 512 16-byte vectors (the backward's blocks then fit twice), else one
// (JAXDNN_NORM_BWD_BLOCKS_PER_SM overrides it). Fewer, longer blocks keep the
// partials' traffic small; at least 16 rows per block.
// Rows that only the stream kernel takes (norms/sm80/norm_stream.cuh; judged
// on the row alone, as if aligned) fill the SMs' threads instead: as many
// blocks (or clusters) as the SMs hold (ChooseBwdStream), at least 4 rows
// per row slot.
inline NormBwdPlan MakeNormBwdPlan(const NormShape& s, int64_t itemsize) {
  constexpr int64_t kWaveSms = 132;
  const int elems = int(16 / itemsize);
  // Odd widths: one partial row per phase-grouped block (a multiple of the
  // phase count; norms/sm80/norm_backward_phased.cuh).
  if (!BwdStreamForced() && s.dim % elems != 0 && s.groups == 1) {
    const PhasedLaunch l = ChoosePhased(s.rows, s.dim, elems, PhaseCountOfBytes(s.dim * itemsize), 16 / elems,
                                        kPhasedBwdMinBody);
    if (l.vpt > 0) {
      NormBwdPlan plan;
      plan.partials = l.blocks;
      return plan;
    }
  }
  if (BwdStreamForced() || ChooseBwdLaunch(s.dim, elems, true).vpt == 0) {
    const StreamLaunch l = ChooseBwdStream(s.dim, elems, true);
    if (l.blocks_per_sm > 0) {
      const int64_t groups = std::max<int64_t>(s.groups, 1);
      const int64_t target = std::max<int64_t>(1, kWaveSms * l.blocks_per_sm / l.cluster / groups);
      // Clusters (rows split over CTAs) go down to a row each: few, wide rows;
      // blocks of several short row slots to two rows a slot, filling the SMs.
      const int64_t min_rows = l.cluster > 1 ? 1 : l.rpc > 1 ? 2 * l.rpc : 4;
      NormBwdPlan plan;
      plan.partials = std::max<int64_t>(1, std::min(target, (s.rows / groups + min_rows - 1) / min_rows));
      return plan;
    }
  }
  const int64_t row_bytes = s.dim * itemsize;
  const int64_t per_sm = SwitchInt(Switch::kNormBwdBlocksPerSm, row_bytes <= 512 * 16 ? 2 : 1);
  const int64_t groups = std::max<int64_t>(s.groups, 1);
  const int64_t target = std::max<int64_t>(1, kWaveSms * per_sm / groups);
  const int64_t rows_per_group = s.rows / groups;
  NormBwdPlan plan;
  plan.partials = std::max<int64_t>(1, std::min(target, (rows_per_group + 15) / 16));
  return plan;
}

}  // namespace jaxdnn::norms
