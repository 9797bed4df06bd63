// The tile loops, each built twice on x86-64 Linux: AVX2 without FMA (so no
// contraction, the same bits as the baseline build) and the baseline, the
// loader picking one at run time. No -march flag: wheels stay portable.
#include "attention/attention_cpu_tiles.h"

#include <limits>

#if defined(__x86_64__) && defined(__ELF__) && (defined(__GNUC__) || defined(__clang__))
#define JAXDNN_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define JAXDNN_CPU_CLONES
#endif

namespace jaxdnn::attention {

// Four rows by sixteen keys of accumulators stay in registers over d.
JAXDNN_CPU_CLONES void ScoreTile(const float* a, int64_t dim, const float* bt, int64_t ld,
                                 float* s) {
  for (int64_t r = 0; r < kQBlock; r += 4) {
    const float* a0 = a + r * dim;
    for (int64_t tc = 0; tc < kKeyBlock; tc += 16) {
      float acc[4][16] = {};
      for (int64_t d = 0; d < dim; ++d) {
        const float* bd = bt + d * ld + tc;
        const float x0 = a0[d], x1 = a0[dim + d], x2 = a0[2 * dim + d], x3 = a0[3 * dim + d];
        for (int u = 0; u < 16; ++u) {
          acc[0][u] += x0 * bd[u];
          acc[1][u] += x1 * bd[u];
          acc[2][u] += x2 * bd[u];
          acc[3][u] += x3 * bd[u];
        }
      }
      for (int k = 0; k < 4; ++k) std::copy(acc[k], acc[k] + 16, s + (r + k) * kKeyBlock + tc);
    }
  }
}

// Sixteen accumulators of a row stay in registers over the keys.
JAXDNN_CPU_CLONES void WeightedRowSum(float* acc, const float* w, const float* rows, int64_t n,
                                      int64_t dim) {
  int64_t dc = 0;
  for (; dc + 16 <= dim; dc += 16) {
    float a[16];
    std::copy(acc + dc, acc + dc + 16, a);
    for (int64_t t = 0; t < n; ++t) {
      if (w[t] == 0.f) continue;
      const float wt = w[t];
      const float* row = rows + t * dim + dc;
      for (int u = 0; u < 16; ++u) a[u] += wt * row[u];
    }
    std::copy(a, a + 16, acc + dc);
  }
  for (int64_t t = 0; t < n && dc < dim; ++t) {
    if (w[t] == 0.f) continue;
    const float wt = w[t];
    const float* row = rows + t * dim;
    for (int64_t d = dc; d < dim; ++d) acc[d] += wt * row[d];
  }
}

JAXDNN_CPU_CLONES void WeightedColumnSum(float* out, const float* w, const float* a,
                                         int64_t n_rows, int64_t n, int64_t dim) {
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * dim;
    int64_t dc = 0;
    for (; dc + 16 <= dim; dc += 16) {
      float x[16];
      std::copy(o + dc, o + dc + 16, x);
      for (int64_t r = 0; r < n_rows; ++r) {
        const float wt = w[r * kKeyBlock + t];
        if (wt == 0.f) continue;
        const float* ar = a + r * dim + dc;
        for (int u = 0; u < 16; ++u) x[u] += wt * ar[u];
      }
      std::copy(x, x + 16, o + dc);
    }
    for (int64_t r = 0; r < n_rows && dc < dim; ++r) {
      const float wt = w[r * kKeyBlock + t];
      if (wt == 0.f) continue;
      const float* ar = a + r * dim;
      for (int64_t d = dc; d < dim; ++d) o[d] += wt * ar[d];
    }
  }
}

// Max is exact in any order, so eight lanes give the sequential answer
// (NaNs are passed over either way: std::max keeps its first argument).
JAXDNN_CPU_CLONES float ScaleAndMax(float* x, int64_t n, float scale) {
  float lane[8];
  std::fill(lane, lane + 8, -std::numeric_limits<float>::infinity());
  int64_t t = 0;
  for (; t + 8 <= n; t += 8) {
    for (int u = 0; u < 8; ++u) {
      x[t + u] *= scale;
      lane[u] = lane[u] < x[t + u] ? x[t + u] : lane[u];
    }
  }
  for (; t < n; ++t) {
    x[t] *= scale;
    lane[0] = lane[0] < x[t] ? x[t] : lane[0];
  }
  float m = lane[0];
  for (int u = 1; u < 8; ++u) m = m < lane[u] ? lane[u] : m;
  return m;
}

}  // namespace jaxdnn::attention
