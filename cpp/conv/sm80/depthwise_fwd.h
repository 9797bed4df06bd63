// The forward of a depthwise convolution (one input channel per group and
// one output channel per input channel: C_in == C_out == groups) on CUDA
// (sm_80 and later), memory-bound: one read of x, one write of y, float32
// sums and the whole epilogue (alpha, bias, beta * residual, activation, z
// saved where the backward needs it). Two kernels: the tiled one
// (depthwise_tiled.cuh: input patches staged in shared memory, any stride
// and kernel dilation, 1-3 spatial dims) and, for input dilation or windows
// whose patch does not fit, a direct loop (one output position and one
// 16-byte channel vector a thread, taps read through L1/L2).
//
// Serves: x and w of one dtype (float32, bfloat16, float16), y and z of x's
// dtype or float32, any float bias, a residual of y's dtype, channels a
// multiple of the vector (4 float32, 8 16-bit), every activation. Runs only
// where the call forced algorithm="direct" until it is measured
// (conv/ffi_cuda.cc); anything else is Refused with the reason.
#pragma once

#include <cuda_runtime_api.h>

#include "common/launch_status.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

// True for one channel per group in and out (C_in == C_out == groups).
bool IsDepthwise(const ConvGeometry& g);

// Why DepthwiseFwdCuda would refuse p, or nullptr.
const char* DepthwiseFwdRefusal(const ConvFwdArgs& p);

// Which kernel: kAuto the tiled one where it serves (unless
// JAXDNN_CONV_DW_TILED=0), kDirect the direct loop, kTiled the tiled one or
// Refused (self-tests force each).
enum class DwKernel { kAuto, kDirect, kTiled };

// Enqueues the forward on `stream` (no workspace, no allocation, no host
// synchronization).
LaunchStatus DepthwiseFwdCuda(const ConvFwdArgs& p, cudaStream_t stream, DwKernel kernel = DwKernel::kAuto);

}  // namespace jaxdnn::conv
