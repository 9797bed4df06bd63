// The FFT convolution's channel mixing on the CPU (fft_mix.h).
#pragma once

#include <complex>

#include "common/ffi_util.h"
#include "conv/fft/fft_mix.h"

namespace jaxdnn::conv {

void FftMixCpu(const FftMixProblem& s, const std::complex<float>* a, const std::complex<float>* b,
               std::complex<float>* out, ffi::ThreadPool* pool);

}  // namespace jaxdnn::conv
