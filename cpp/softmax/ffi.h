// Handler symbols of the softmax family, one per direction and platform.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jaxdnn::softmax {

XLA_FFI_DECLARE_HANDLER_SYMBOL(kSoftmaxFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kSoftmaxBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kSoftmaxFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kSoftmaxBwdCuda);

}  // namespace jaxdnn::softmax
