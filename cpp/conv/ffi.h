// Handler symbols of the convolution family, one per direction (CPU; the
// CUDA kernels are issue 25's next step).
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jaxdnn::conv {

XLA_FFI_DECLARE_HANDLER_SYMBOL(kConvFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kConvDgradCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kConvWgradCpu);

}  // namespace jaxdnn::conv
