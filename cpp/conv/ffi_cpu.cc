// XLA FFI handlers for CPU convolution: decode the call frame, run the kernel.
#include "common/ffi_registry.h"
#include "conv/cpu/conv_kernels.h"
#include "conv/ffi.h"
#include "conv/fft/ffi_fft.h"
#include "conv/geometry_attrs.h"

namespace jaxdnn::conv {
namespace {

// The handlers' attribute list, as JAXDNN_CONV_BIND declares it.
#define JAXDNN_CONV_ATTR_PARAMS                                                                              \
  int64_t in_channels, int64_t out_channels, int64_t groups, Dims in, Dims out, Dims window, Dims stride,    \
      Dims in_dilation, Dims k_dilation, Dims pad_lo, int32_t act, float act_param, float alpha, float beta, \
      int32_t saved, int32_t has_bias, int32_t has_residual, int32_t algorithm
#define JAXDNN_CONV_ATTRS                                                                             \
  ConvAttrs {                                                                                         \
    in_channels, out_channels, groups, in, out, window, stride, in_dilation, k_dilation, pad_lo, act, \
        act_param, alpha, beta, saved, has_bias, has_residual, algorithm                              \
  }

template <typename Args, typename Read, typename Run>
ffi::Error Handle(const char* op, ffi::ThreadPool& pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                  const ConvAttrs& attrs, Read read, Run run) {
  auto g = GeometryOf(BatchOf(args), attrs);
  if (!g.has_value()) return g.error();
  auto e = EpilogueOf(attrs);
  if (!e.has_value()) return e.error();
  ffi::ErrorOr<Args> p = read(args, rets, *g, *e);
  if (!p.has_value()) return p.error();
  return RunCatching(op, [&] { return run(*p, &pool); });
}

ffi::Error Fwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
               JAXDNN_CONV_ATTR_PARAMS) {
  return Handle<ConvFwdArgs>("jaxdnn conv forward", pool, args, rets, JAXDNN_CONV_ATTRS, ReadConvFwdCall,
                             ConvFwdCpu);
}

ffi::Error Dgrad(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                 JAXDNN_CONV_ATTR_PARAMS) {
  return Handle<ConvDgradArgs>("jaxdnn conv data gradient", pool, args, rets, JAXDNN_CONV_ATTRS,
                               ReadConvDgradCall, ConvDgradCpu);
}

ffi::Error Wgrad(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                 JAXDNN_CONV_ATTR_PARAMS) {
  return Handle<ConvWgradArgs>("jaxdnn conv weight gradient", pool, args, rets, JAXDNN_CONV_ATTRS,
                               ReadConvWgradCall, ConvWgradCpu);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kConvFwdCpu, Fwd, JAXDNN_CONV_BIND(ffi::ThreadPool));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kConvDgradCpu, Dgrad, JAXDNN_CONV_BIND(ffi::ThreadPool));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kConvWgradCpu, Wgrad, JAXDNN_CONV_BIND(ffi::ThreadPool));

FamilyExports CpuExports() {
  return {{{"jaxdnn_conv_fwd", kConvFwdCpu},
           {"jaxdnn_conv_dgrad", kConvDgradCpu},
           {"jaxdnn_conv_wgrad", kConvWgradCpu},
           {"jaxdnn_conv_fft_mix", kConvFftMixCpu}},
          {}};
}

}  // namespace jaxdnn::conv
