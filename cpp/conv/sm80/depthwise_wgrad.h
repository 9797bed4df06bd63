// The weight gradient of a depthwise convolution on CUDA (sm_80 and later):
// dw[tap][c] = alpha * sum over the batch and output positions of
// x[n, input of (position, tap), c] * dz[n, position, c], dz being
// act'(saved) * dy (computed before). Deterministic: each CTA sums a fixed
// run of output tiles (the forward's tiles and patches, depthwise_tiled.cuh)
// into per-thread sums for up to 9 taps at a time, reduces them over its
// threads in a fixed order into one partial per CTA, and a second kernel adds
// the CTAs' partials in order.
//
// Serves what the tiled forward serves (no input dilation, patches up to
// 48 KiB), x and dz of one dtype (float32, bfloat16, float16), dw in that
// dtype or float32, channels a multiple of the vector. Not yet called by
// the FFI handler: its self-test runs first.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/launch_status.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

struct DepthwiseWgradArgs {
  ConvGeometry g;
  ffi::DataType dtype;     // x's and dz's
  ffi::DataType dw_dtype;  // dw's: dtype or float32
  const void* x = nullptr;
  const void* dz = nullptr;
  void* dw = nullptr;  // [taps][C]
  float alpha = 1.0f;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Why DepthwiseWgradCuda would refuse p, or nullptr.
const char* DepthwiseWgradRefusal(const DepthwiseWgradArgs& p);

// The workspace the call needs (the CTAs' float32 partials), by the plan the
// launcher runs.
size_t DepthwiseWgradWorkspace(const DepthwiseWgradArgs& p);

LaunchStatus DepthwiseWgradCuda(const DepthwiseWgradArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::conv
