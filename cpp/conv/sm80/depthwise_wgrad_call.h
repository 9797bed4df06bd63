// The convolution's weight-gradient call (ConvWgradArgs: dy, the saved
// activation, x -> dw and the bias gradient) for a depthwise layer with
// algorithm="direct": dz = act'(saved) * dy and the bias gradient's column
// sums by the sm90 gradients' pre-pass (conv/sm90/conv_sm90_aux.h), then
// the depthwise weight gradient (depthwise_wgrad.h). Deterministic.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/launch_status.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

// Why DepthwiseWgradCall would refuse p (the batch does not matter), or nullptr.
const char* DepthwiseWgradCallRefusal(const ConvWgradArgs& p);

// dz (where an activation needs it), the CTAs' partials, the bias partials.
size_t DepthwiseWgradCallWorkspace(const ConvWgradArgs& p);

LaunchStatus DepthwiseWgradCall(const ConvWgradArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::conv
