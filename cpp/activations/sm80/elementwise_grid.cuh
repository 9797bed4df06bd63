// The grid of the activations' elementwise kernels (bias_act forward, the
// bias-free backward, glu both ways): a block for every ty * kUnroll rows, so
// each thread loads its rows once and exits (the shape of XLA's loop
// fusions). It streams the GLU at 101-102% of the copy rate where
// common/rows_plan.h's two waves of row-walking blocks reached 95-96%
// (docs/perf/activations.md); JAXDNN_ACT_GRID=waves keeps the latter.
#pragma once

#include "common/rows_plan.h"
#include "common/sm80/row_walk.cuh"
#include "common/switches.h"

namespace jaxdnn::activations {

inline GridPlan ElementwiseGrid(int64_t rows, int64_t cols, int64_t stride, int64_t itemsize) {
  const GridPlan g = MakeGridPlan(rows, cols, stride, itemsize);
  return SwitchText(Switch::kActGrid) == "waves" ? g : OneRowGroupAThread(g, rows, kUnroll);
}

}  // namespace jaxdnn::activations
