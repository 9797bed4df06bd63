// The FFT mixing call's operands checked against its problem (both
// platforms' handlers read a call through this).
#pragma once

#include <complex>

#include "common/ffi_util.h"
#include "conv/fft/fft_mix.h"

namespace jaxdnn::conv {

struct FftMixCall {
  FftMixProblem s;
  const std::complex<float>* a;
  const std::complex<float>* b;
  std::complex<float>* out;
};

// The attributes every handler binds: the mode and the problem's sizes
// (the batch is a's leading dim).
#define JAXDNN_FFT_MIX_BIND(ctx)     \
  ffi::Ffi::Bind()                   \
      .Ctx<ctx>()                    \
      .Arg<ffi::AnyBuffer>()         \
      .Arg<ffi::AnyBuffer>()         \
      .Ret<ffi::AnyBuffer>()         \
      .Attr<int32_t>("mode")         \
      .Attr<int64_t>("in_channels")  \
      .Attr<int64_t>("out_channels") \
      .Attr<int64_t>("groups")       \
      .Attr<int64_t>("freqs")

inline ffi::ErrorOr<FftMixCall> ReadFftMixCall(ffi::AnyBuffer a, ffi::AnyBuffer b,
                                               ffi::Result<ffi::AnyBuffer> out, int32_t mode,
                                               int64_t in_channels, int64_t out_channels, int64_t groups,
                                               int64_t freqs) {
  const char* op = "jaxdnn conv FFT mixing";
  const int64_t batch = a.dimensions().size() ? a.dimensions()[0] : 0;
  const FftMixProblem s{mode, batch, in_channels, out_channels, groups, freqs};
  if (const char* why = FftMixRefusal(s)) return ffi::Unexpected(InvalidArg(op, why));
  for (const ffi::AnyBuffer* buf : {&a, &b, &*out}) {
    if (buf->element_type() != ffi::DataType::C64) {
      return ffi::Unexpected(InvalidArg(op, "operands and result must be complex64"));
    }
  }
  const FftMixSizes n = SizesOf(s);
  if (int64_t(a.element_count()) != n.a || int64_t(b.element_count()) != n.b ||
      int64_t(out->element_count()) != n.out) {
    return ffi::Unexpected(InvalidArg(op, "operand sizes do not match the mode, channels, groups and freqs"));
  }
  return FftMixCall{s, static_cast<const std::complex<float>*>(a.untyped_data()),
                    static_cast<const std::complex<float>*>(b.untyped_data()),
                    static_cast<std::complex<float>*>(out->untyped_data())};
}

}  // namespace jaxdnn::conv
