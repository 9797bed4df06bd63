// Handler symbols of the norm family, one per platform and direction.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jaxdnn::norms {

XLA_FFI_DECLARE_HANDLER_SYMBOL(kNormFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kNormBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kNormFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kNormBwdCuda);

}  // namespace jaxdnn::norms
