// The FFT convolution's per-frequency channel mixing (jaxdnn/conv/fft.py):
// the spectra come from XLA's FFTs laid out [rows, F] with the frequency
// contiguous, and each direction is one complex contraction per frequency
// and group:
//   forward: Y[n, co]  = sum_ci X[n, ci] conj(W[ci, co])   (correlation)
//   dgrad:   DX[n, ci] = sum_co DZ[n, co] W[ci, co]
//   wgrad:   DW[ci, co] = sum_n X[n, ci] conj(DZ[n, co])
// with W the weights' spectrum [C_in / groups, C_out, F]. Sums run in a fixed
// order of the contracted index: deterministic.
#pragma once

#include <cstdint>

namespace jaxdnn::conv {

enum FftMixMode : int32_t { kFftForward = 0, kFftDgrad = 1, kFftWgrad = 2 };

struct FftMixProblem {
  int32_t mode;
  int64_t batch, in_channels, out_channels, groups, freqs;
};

// out[g, p, q, f] = sum_{r < R} L[g, p, r, f] * R'[g, r, q, f] (R' = conj(R)
// where conj_r), each operand's row index a linear form of (p or q, r, g);
// element (row, f) at row * F + f.
struct FftContraction {
  int64_t groups, P, Q, R;
  int64_t lp, lr, lg, rr, rq, rg, op, oq, og;
  bool conj_r;
};

inline FftContraction ContractionOf(const FftMixProblem& s) {
  const int64_t n = s.batch, ci = s.in_channels, co = s.out_channels, g = s.groups;
  const int64_t cig = ci / g, cog = co / g;
  switch (s.mode) {
    case kFftForward: return {g, n, cog, cig, ci, 1, cig, co, 1, cog, co, 1, cog, true};
    case kFftDgrad: return {g, n, cig, cog, co, 1, cog, 1, co, cog, ci, 1, cig, false};
    default: return {g, cig, cog, n, 1, ci, cig, co, 1, cog, co, 1, cog, true};
  }
}

// The complex elements of the operands a, b and the result, per mode:
// forward a = X [N, C_in, F], b = W, out [N, C_out, F]; dgrad a = DZ
// [N, C_out, F], b = W, out [N, C_in, F]; wgrad a = X, b = DZ, out = W's
// shape [C_in / groups, C_out, F].
struct FftMixSizes {
  int64_t a, b, out;
};

inline FftMixSizes SizesOf(const FftMixProblem& s) {
  const int64_t x = s.batch * s.in_channels * s.freqs, z = s.batch * s.out_channels * s.freqs;
  const int64_t w = s.in_channels / s.groups * s.out_channels * s.freqs;
  switch (s.mode) {
    case kFftForward: return {x, w, z};
    case kFftDgrad: return {z, w, x};
    default: return {x, z, w};
  }
}

// Why the problem is malformed, or nullptr.
inline const char* FftMixRefusal(const FftMixProblem& s) {
  if (s.mode < kFftForward || s.mode > kFftWgrad) return "mode must be 0 (forward), 1 (dgrad) or 2 (wgrad)";
  if (s.batch < 0 || s.freqs < 1 || s.groups < 1 || s.in_channels < 1 || s.out_channels < 1) {
    return "the batch must be >= 0; freqs, groups and channel counts > 0";
  }
  if (s.in_channels % s.groups || s.out_channels % s.groups) return "groups must divide both channel counts";
  return nullptr;
}

}  // namespace jaxdnn::conv
