// Handler symbols of the pooling family, one per direction and platform.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jaxdnn::pooling {

XLA_FFI_DECLARE_HANDLER_SYMBOL(kPoolFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kPoolBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kPoolFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kPoolBwdCuda);

}  // namespace jaxdnn::pooling
