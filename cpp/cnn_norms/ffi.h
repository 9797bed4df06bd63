// Handler symbols of the CNN norms family (the group norm and the BatchNorm
// steps), one per step and platform.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jaxdnn::cnn_norms {

XLA_FFI_DECLARE_HANDLER_SYMBOL(kGroupNormFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kGroupNormBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kBatchNormStatsCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kBatchNormApplyCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kBatchNormBwdReduceCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kBatchNormBwdApplyCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kGroupNormFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kGroupNormBwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kBatchNormStatsCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kBatchNormApplyCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kBatchNormBwdReduceCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kBatchNormBwdApplyCuda);

}  // namespace jaxdnn::cnn_norms
