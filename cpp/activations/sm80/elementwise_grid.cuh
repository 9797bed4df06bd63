// The grid of the activations' elementwise kernels (bias_act forward, the
// bias-free backward, glu both ways). Default: common/rows_plan.h's at most
// two waves of blocks, each thread walking many rows. JAXDNN_ACT_GRID=rows:
// a block for every ty * kUnroll rows, so each thread loads its rows once
// and exits (the shape of XLA's loop fusions, which stream the GLU 4-7%
// faster than the two-wave walk: docs/perf/activations.md).
#pragma once

#include <algorithm>

#include "common/rows_plan.h"
#include "common/sm80/row_walk.cuh"
#include "common/switches.h"

namespace jaxdnn::activations {

inline GridPlan ElementwiseGrid(int64_t rows, int64_t cols, int64_t stride, int64_t itemsize) {
  GridPlan g = MakeGridPlan(rows, cols, stride, itemsize);
  if (SwitchText(Switch::kActGrid) == "rows") {
    g.row_blocks = std::clamp<int64_t>(CeilDiv(rows, int64_t(g.ty) * kUnroll), 1, kGridYLimit);
  }
  return g;
}

}  // namespace jaxdnn::activations
