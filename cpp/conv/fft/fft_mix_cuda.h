// The FFT convolution's channel mixing on CUDA (fft_mix.h, fft_mix.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <complex>

#include "conv/fft/fft_mix.h"

namespace jaxdnn::conv {

// Launches the mixing on `stream`; the launch's error is left for the
// caller's CheckLaunch.
void LaunchFftMix(const FftMixProblem& s, const std::complex<float>* a, const std::complex<float>* b,
                  std::complex<float>* out, cudaStream_t stream);

}  // namespace jaxdnn::conv
