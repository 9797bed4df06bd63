// Handler symbols of the attention family, one per platform and direction.
#pragma once

#include "xla/ffi/api/ffi.h"

// The attributes both directions take, on both platforms (the backward adds
// "deterministic").
#define JAXDNN_ATTENTION_ATTRS       \
  .RemainingArgs()                   \
      .RemainingRets()               \
      .Attr<int32_t>("operands")     \
      .Attr<float>("scale")          \
      .Attr<float>("softcap")        \
      .Attr<int32_t>("causal")       \
      .Attr<int32_t>("window_left")  \
      .Attr<int32_t>("window_right") \
      .Attr<float>("dropout_rate")

// paged_attention's forward (causal at the end of each context, no dropout).
#define JAXDNN_PAGED_ATTENTION_ATTRS \
  .RemainingArgs()                   \
      .RemainingRets()               \
      .Attr<float>("scale")          \
      .Attr<float>("softcap")        \
      .Attr<int32_t>("window_left")  \
      .Attr<int32_t>("window_right")

namespace jaxdnn::attention {

XLA_FFI_DECLARE_HANDLER_SYMBOL(kAttentionFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kAttentionBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kAttentionFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kAttentionBwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kPagedAttentionFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(kPagedAttentionFwdCuda);

}  // namespace jaxdnn::attention
