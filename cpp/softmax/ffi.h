// Handler symbols of the softmax family (softmax and cross-entropy), one per
// op, direction and platform.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jaxdnn::softmax {

XLA_FFI_DECLARE_HANDLER_SYMBOL(kSoftmaxFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kSoftmaxBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kSoftmaxFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kSoftmaxBwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kCrossEntropyFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kCrossEntropyBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kCrossEntropyFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kCrossEntropyBwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kSoftCrossEntropyFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kSoftCrossEntropyBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kSoftCrossEntropyFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kSoftCrossEntropyBwdCuda);

}  // namespace jaxdnn::softmax
