// XLA FFI handler of the FFT convolution's mixing on CUDA: the stream from
// XLA, no allocation or synchronization (command-buffer compatible).
#include "common/cuda_check.h"
#include "conv/fft/fft_mix_call.h"
#include "conv/fft/fft_mix_cuda.h"
#include "conv/fft/ffi_fft.h"

namespace jaxdnn::conv {
namespace {

ffi::Error Mix(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> out,
               int32_t mode, int64_t in_channels, int64_t out_channels, int64_t groups, int64_t freqs) {
  auto call = ReadFftMixCall(a, b, out, mode, in_channels, out_channels, groups, freqs);
  if (!call.has_value()) return call.error();
  ClearStaleLaunchError();
  LaunchFftMix(call->s, call->a, call->b, call->out, stream);
  return CheckLaunch("jaxdnn conv FFT mixing: kernel launch");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kConvFftMixCuda, Mix, JAXDNN_FFT_MIX_BIND(ffi::PlatformStream<cudaStream_t>),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxdnn::conv
