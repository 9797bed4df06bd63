// Handler symbols of the convolution family: one per direction on the CPU;
// the CUDA forward is defined in ffi_cuda.cc (with CUTLASS).
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jaxdnn::conv {

XLA_FFI_DECLARE_HANDLER_SYMBOL(kConvFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kConvDgradCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kConvWgradCpu);

}  // namespace jaxdnn::conv
