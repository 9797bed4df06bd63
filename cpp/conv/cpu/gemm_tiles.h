// The CPU convolutions' GEMM core: C += A B with a register-blocked
// micro-kernel (6 rows x 16 columns of float32 accumulators), B given as runs
// of rows so a window's valid taps concatenate without copies. Used by the
// implicit-GEMM forward, the weight gradient and the Winograd products.
#pragma once

#include <cstdint>

namespace jaxdnn::conv {

constexpr int64_t kTileRows = 6, kTileCols = 16;

inline int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// A run of B's rows: the GEMM's depth is a concatenation of such runs (the
// valid tap rows of a window), A's columns following them in order.
struct Run {
  const float* b;
  int64_t depth;
};

// C[p][c] += sum_k A[p][k] B[k][c] for p < rows, c < cols, B given as runs
// of rows (ldb floats apart). A has RoundUp(rows, 6) rows (zero past `rows`),
// B RoundUp(cols, 16) columns (zero past `cols`), so the tiles read in
// bounds without branches. Its definition is compiled for AVX-512 and AVX2 +
// FMA as well as the baseline (common/cpu_clones.h; the tile's 12
// accumulators fit AVX2's 16 registers): callers reach the clone through
// the one exported symbol, so the declaration carries no attribute.
void GemmAcc(const float* a, int64_t lda, const Run* runs, int64_t nruns, int64_t ldb, float* c, int64_t ldc,
             int64_t rows, int64_t cols);

}  // namespace jaxdnn::conv
