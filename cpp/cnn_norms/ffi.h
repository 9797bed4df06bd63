// Handler symbols of the CNN norms family (the group norm), one per
// direction and platform.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jaxdnn::cnn_norms {

XLA_FFI_DECLARE_HANDLER_SYMBOL(kGroupNormFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kGroupNormBwdCpu);

}  // namespace jaxdnn::cnn_norms
