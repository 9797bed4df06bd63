// Block-strided loops over a 2D index space without a division per element.
#pragma once

namespace jaxdnn {

// Row and column of i = threadIdx.x + n * blockDim.x in a grid of `cols`
// columns, stepped with one division a walk instead of one an element: a
// division by a runtime value is ~20 instructions (64-bit: more), which in a
// staging loop can cost more than the copy (docs/perf/recurrent.md).
struct RowCol {
  int r, c, dr, dc, cols;
  __device__ __forceinline__ explicit RowCol(int cols_)
      : r(int(threadIdx.x) / cols_),
        c(int(threadIdx.x) % cols_),
        dr(int(blockDim.x) / cols_),
        dc(int(blockDim.x) % cols_),
        cols(cols_) {}
  __device__ __forceinline__ void Next() {
    r += dr;
    c += dc;
    if (c >= cols) {
      c -= cols;
      ++r;
    }
  }
};

// fn(i, row, col) for this thread's elements of a rows x cols grid.
template <typename Fn>
__device__ __forceinline__ void ForRowsCols(int rows, int cols, Fn fn) {
  if (cols <= 0) return;
  RowCol rc(cols);
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x, rc.Next()) fn(i, rc.r, rc.c);
}

}  // namespace jaxdnn
