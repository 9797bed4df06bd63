// The CUDA plan of the channels-last elementwise and column-sum kernels
// (bias_act, glu, the CNN norms), made from the problem alone: the 2-D grid
// (threads over a row's 16-byte vectors, or its elements when a row is not
// whole vectors, and blocks over rows), and for column sums the row chunks,
// each writing float32 partial rows to a workspace. The handlers check the
// workspace XLA gives against it; Python sizes that workspace by asking the
// same function (the families' plan queries).
#pragma once

#include <algorithm>
#include <cstdint>

namespace jaxdnn {

struct GridPlan {
  bool vec = false;    // 16-byte vectors (cols, and any row stride, whole vectors)
  int64_t units = 0;   // vectors (or elements) per row
  int tx = 1, ty = 1;  // block: tx threads over a row's units, ty rows
  int64_t col_blocks = 1;
  int64_t row_blocks = 1;  // grid.y (backward with bias: the partials)
};

constexpr int64_t kBlockThreads = 256;
constexpr int64_t kResidentBlocks = 132 * 8;  // one full wave of 256-thread blocks on an H100/H200
constexpr int64_t kGridYLimit = 65535;

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// `stride`: elements between rows of every operand (a GLU's split input
// puts value and gate in one row of 2 * cols).
// `samples`: independent problems of `rows` rows each, on grid.z (the group
// norm's samples), sharing the waves.
inline GridPlan MakeGridPlan(int64_t rows, int64_t cols, int64_t stride, int64_t itemsize,
                             int64_t samples = 1) {
  GridPlan p;
  const int64_t per_vec = 16 / itemsize;
  p.vec = cols % per_vec == 0 && stride % per_vec == 0;
  p.units = p.vec ? cols / per_vec : cols;
  int tx = 1;
  while (tx < 32 && tx < p.units) tx *= 2;
  p.tx = tx;
  p.ty = int(kBlockThreads / tx);
  p.col_blocks = std::max<int64_t>(1, CeilDiv(p.units, tx));
  // At most two waves of blocks; a thread takes 16 rows where that still
  // fills one wave (its setup, the row's parameters, is paid once), else
  // down to 4 to fill it.
  const int64_t want = std::max<int64_t>(1, CeilDiv(2 * kResidentBlocks, p.col_blocks * samples));
  const int64_t wave = std::max<int64_t>(1, CeilDiv(kResidentBlocks, p.col_blocks * samples));
  const int64_t blocks = std::max(CeilDiv(rows, p.ty * 16), std::min(wave, CeilDiv(rows, p.ty * 4)));
  p.row_blocks = std::clamp<int64_t>(blocks, 1, std::min(want, kGridYLimit));
  return p;
}

// The plan g with a block for every ty * rows_a_thread rows: each thread
// loads its rows once and exits (the shape of XLA's loop fusions) instead of
// two waves of blocks walking the rows. Only for kernels without per-block
// partials (the grid is not part of a workspace size).
inline GridPlan OneRowGroupAThread(GridPlan g, int64_t rows, int64_t rows_a_thread) {
  g.row_blocks = std::clamp<int64_t>(CeilDiv(rows, int64_t(g.ty) * rows_a_thread), 1, kGridYLimit);
  return g;
}

// The plan g with the fewest idle threads over a row: 8, 16 or 32 threads
// across (the widest that wastes least), the rest of the 256 over rows. At
// 320 bf16 channels (40 vectors) 32 across leaves 24 of 64 threads idle, 8
// across none. The grid's rows (and any partials) stay as planned.
inline GridPlan TightColumns(GridPlan g) {
  if (g.units < 8) return g;
  int best = g.tx;
  int64_t best_idle = CeilDiv(g.units, g.tx) * g.tx - g.units;
  for (int tx = 16; tx >= 8; tx /= 2) {
    const int64_t idle = CeilDiv(g.units, tx) * tx - g.units;
    if (idle < best_idle) best = tx, best_idle = idle;
  }
  g.tx = best;
  g.ty = int(kBlockThreads / best);
  g.col_blocks = CeilDiv(g.units, best);
  return g;
}

// Column sums: one wave of blocks, chunks of at least 32 rows (the
// partials' traffic stays a few percent of the rows').
inline GridPlan MakeColumnSumPlan(int64_t rows, int64_t cols, int64_t itemsize, int64_t samples = 1) {
  GridPlan p = MakeGridPlan(rows, cols, cols, itemsize, samples);
  const int64_t want = std::max<int64_t>(1, CeilDiv(kResidentBlocks, p.col_blocks * samples));
  p.row_blocks = std::clamp<int64_t>(CeilDiv(rows, 32), 1, std::min(want, kGridYLimit));
  return p;
}

}  // namespace jaxdnn
