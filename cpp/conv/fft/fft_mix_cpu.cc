// The FFT convolution's channel mixing on the CPU: one work item per output
// row (group, p, q), whose F frequencies are contiguous; the contracted
// index r runs in order, each step a vectorizable pass over the row.
#include "conv/fft/fft_mix_cpu.h"

#include "common/cpu_parallel.h"

namespace jaxdnn::conv {
namespace {

// out[f] += l[f] * r[f] (conj(r[f]) where kConj) over a row of F complex values.
template <bool kConj>
void MacRow(const float* l, const float* r, float* out, int64_t freqs) {
  for (int64_t f = 0; f < freqs; ++f) {
    const float lr = l[2 * f], li = l[2 * f + 1], rr = r[2 * f], ri = kConj ? -r[2 * f + 1] : r[2 * f + 1];
    out[2 * f] += lr * rr - li * ri;
    out[2 * f + 1] += lr * ri + li * rr;
  }
}

}  // namespace

void FftMixCpu(const FftMixProblem& s, const std::complex<float>* a, const std::complex<float>* b,
               std::complex<float>* out, ffi::ThreadPool* pool) {
  const FftContraction c = ContractionOf(s);
  const int64_t F = s.freqs;
  const float* L = reinterpret_cast<const float*>(a);
  const float* R = reinterpret_cast<const float*>(b);
  float* O = reinterpret_cast<float*>(out);
  ParallelFor(pool, c.groups * c.P * c.Q, [&](int64_t item) {
    const int64_t q = item % c.Q, p = (item / c.Q) % c.P, g = item / (c.Q * c.P);
    float* o = O + 2 * (p * c.op + q * c.oq + g * c.og) * F;
    for (int64_t f = 0; f < 2 * F; ++f) o[f] = 0.f;
    for (int64_t r = 0; r < c.R; ++r) {
      const float* l = L + 2 * (p * c.lp + r * c.lr + g * c.lg) * F;
      const float* rv = R + 2 * (r * c.rr + q * c.rq + g * c.rg) * F;
      if (c.conj_r) {
        MacRow<true>(l, rv, o, F);
      } else {
        MacRow<false>(l, rv, o, F);
      }
    }
  });
}

}  // namespace jaxdnn::conv
