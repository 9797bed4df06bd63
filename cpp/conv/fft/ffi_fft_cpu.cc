// XLA FFI handler of the FFT convolution's mixing on the CPU.
#include "conv/fft/fft_mix_call.h"
#include "conv/fft/fft_mix_cpu.h"
#include "conv/fft/ffi_fft.h"

namespace jaxdnn::conv {
namespace {

ffi::Error Mix(ffi::ThreadPool pool, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> out,
               int32_t mode, int64_t in_channels, int64_t out_channels, int64_t groups, int64_t freqs) {
  auto call = ReadFftMixCall(a, b, out, mode, in_channels, out_channels, groups, freqs);
  if (!call.has_value()) return call.error();
  return RunCatching("jaxdnn conv FFT mixing", [&] {
    FftMixCpu(call->s, call->a, call->b, call->out, &pool);
    return ffi::Error::Success();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kConvFftMixCpu, Mix, JAXDNN_FFT_MIX_BIND(ffi::ThreadPool));

}  // namespace jaxdnn::conv
