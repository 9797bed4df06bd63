// Launch plumbing shared by the family's warp-per-row CUDA kernels: kWarps
// rows per block, a grid that row loops stride over (no grid limit), and the
// dtype dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "softmax/problem.h"

namespace jaxdnn::softmax {

constexpr int kWarps = 8;  // rows per block

inline unsigned WarpRowBlocks(int64_t rows) {
  const int64_t want = (rows + kWarps - 1) / kWarps;
  return unsigned(want < 65535 * 8 ? want : 65535 * 8);  // then grid-stride
}

// launch(T{}, grid, block) with T the element type of `dtype`; nothing for an
// empty problem; the launch's error.
template <typename Launch>
cudaError_t LaunchByDtype(ffi::DataType dtype, const SoftmaxShape& s, Launch launch) {
  if (s.rows == 0 || s.cols == 0) return cudaSuccess;
  const dim3 grid(WarpRowBlocks(s.rows)), block(32 * kWarps);
  switch (dtype) {
    case ffi::DataType::F32: launch(float{}, grid, block); break;
    case ffi::DataType::BF16: launch(__nv_bfloat16{}, grid, block); break;
    case ffi::DataType::F16: launch(__half{}, grid, block); break;
    default: return cudaErrorInvalidValue;  // the call-frame readers admit only these
  }
  return cudaGetLastError();
}

}  // namespace jaxdnn::softmax
