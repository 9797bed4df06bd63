// Handler symbols of the activations family (bias_act and glu), one per op,
// direction and platform.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jaxdnn::activations {

XLA_FFI_DECLARE_HANDLER_SYMBOL(kBiasActFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kBiasActBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kGluFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kGluBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kBiasActFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kBiasActBwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kGluFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kGluBwdCuda);

}  // namespace jaxdnn::activations
