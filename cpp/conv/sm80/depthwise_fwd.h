// The forward of a depthwise convolution (one input channel per group and
// one output channel per input channel: C_in == C_out == groups) as a
// channel-vector direct loop on CUDA (sm_80 and later): each thread owns one
// output position and one 16-byte vector of channels, walks the window's
// taps with problem.h's index rule (strides, padding, input and kernel
// dilation, 1-3 spatial dims), accumulates in float32 and applies the whole
// epilogue (alpha, bias, beta * residual, activation, z saved where the
// backward needs it). A memory-bound kernel: one read of x (neighbouring
// positions share their taps' lines through L1/L2), one write of y.
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

// Enqueues the forward on `stream` (no workspace, no allocation, no host
// synchronization).
LaunchStatus DepthwiseFwdCuda(const ConvFwdArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::conv
