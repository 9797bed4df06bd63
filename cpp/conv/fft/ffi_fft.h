// Handler symbols of the FFT convolution's mixing step (CPU and CUDA).
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jaxdnn::conv {

XLA_FFI_DECLARE_HANDLER_SYMBOL(kConvFftMixCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kConvFftMixCuda);

}  // namespace jaxdnn::conv
