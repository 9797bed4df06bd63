// The tile loops, each built for three x86-64 levels on Linux (AVX-512,
// AVX2 with FMA, the baseline), the loader picking one at run time: no
// -march flag, so wheels stay portable. With FMA the products are fused
// into the sums, so the last bits depend on the level the machine takes;
// on one machine every run picks the same clone and gives the same bits.
#include "attention/cpu/attention_tiles.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "common/cpu_clones.h"

namespace jaxdnn::attention {

// Four rows by sixteen keys of accumulators stay in registers over d.
JAXDNN_CPU_CLONES void ScoreTile(const float* a, int64_t dim, const float* panel, float* s) {
  for (int64_t r = 0; r < kQBlock; r += 4) {
    const float* a0 = a + r * dim;
    for (int64_t tc = 0; tc < kKeyBlock; tc += 16) {
      float acc[4][16] = {};
      for (int64_t d = 0; d < dim; ++d) {
        const float* bd = panel + d * kKeyBlock + tc;
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
JAXDNN_CPU_CLONES void WeightedRowSum(float* acc, const float* w, const float* rows, int64_t n, int64_t dim) {
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

JAXDNN_CPU_CLONES void WeightedColumnSum(float* out, const float* w, const float* a, int64_t n_rows,
                                         int64_t n, int64_t dim) {
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

// Four rows by sixteen columns of accumulators: independent chains, so the
// adds overlap rather than wait on each other.
JAXDNN_CPU_CLONES void RowSumTile(float* acc, const float* w, const float* rows, int64_t n, int64_t dim) {
  int64_t dc = 0;
  for (; dc + 16 <= dim; dc += 16) {
    for (int64_t r = 0; r < kQBlock; r += 4) {
      float a[4][16];
      for (int k = 0; k < 4; ++k) std::copy(acc + (r + k) * dim + dc, acc + (r + k) * dim + dc + 16, a[k]);
      const float* w0 = w + r * kKeyBlock;
      for (int64_t t = 0; t < n; ++t) {
        const float* row = rows + t * dim + dc;
        const float x0 = w0[t], x1 = w0[kKeyBlock + t], x2 = w0[2 * kKeyBlock + t],
                    x3 = w0[3 * kKeyBlock + t];
        for (int u = 0; u < 16; ++u) {
          a[0][u] += x0 * row[u];
          a[1][u] += x1 * row[u];
          a[2][u] += x2 * row[u];
          a[3][u] += x3 * row[u];
        }
      }
      for (int k = 0; k < 4; ++k) std::copy(a[k], a[k] + 16, acc + (r + k) * dim + dc);
    }
  }
  for (int64_t r = 0; r < kQBlock && dc < dim; ++r) {
    for (int64_t t = 0; t < n; ++t) {
      const float wt = w[r * kKeyBlock + t];
      for (int64_t d = dc; d < dim; ++d) acc[r * dim + d] += wt * rows[t * dim + d];
    }
  }
}

JAXDNN_CPU_CLONES void ColumnSumTile(float* out, const float* w, const float* a, int64_t dim) {
  int64_t dc = 0;
  for (; dc + 16 <= dim; dc += 16) {
    for (int64_t t = 0; t < kKeyBlock; t += 4) {
      float x[4][16];
      for (int k = 0; k < 4; ++k) std::copy(out + (t + k) * dim + dc, out + (t + k) * dim + dc + 16, x[k]);
      for (int64_t r = 0; r < kQBlock; ++r) {
        const float* ar = a + r * dim + dc;
        const float* wr = w + r * kKeyBlock + t;
        const float w0 = wr[0], w1 = wr[1], w2 = wr[2], w3 = wr[3];
        for (int u = 0; u < 16; ++u) {
          x[0][u] += w0 * ar[u];
          x[1][u] += w1 * ar[u];
          x[2][u] += w2 * ar[u];
          x[3][u] += w3 * ar[u];
        }
      }
      for (int k = 0; k < 4; ++k) std::copy(x[k], x[k] + 16, out + (t + k) * dim + dc);
    }
  }
  for (int64_t t = 0; t < kKeyBlock && dc < dim; ++t) {
    for (int64_t r = 0; r < kQBlock; ++r) {
      const float wt = w[r * kKeyBlock + t];
      for (int64_t d = dc; d < dim; ++d) out[t * dim + d] += wt * a[r * dim + d];
    }
  }
}

// An integer OR over the exponent bits: vectorizes, unlike std::isfinite.
JAXDNN_CPU_CLONES bool AllFinite(const float* x, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    bad |= uint32_t((u & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

namespace {

// e^x in plain float arithmetic (Cephes expf: x = n ln2 + r, a degree-6
// polynomial in r, 2^n through the exponent bits), so a loop of them
// vectorizes. Within 2 ulp of a correctly rounded expf; 0 below -87.33
// (where expf would give a subnormal) and for -inf.
inline float VecExp(float x) {
  const float lo = -87.33654f, hi = 88.72283f;
  const float xc = x < lo ? lo : (x > hi ? hi : x);
  const float magic = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (xc * 1.44269504088896341f + magic) - magic;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.f;
  const int32_t e = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, 4);
  const float y = p * scale;
  return x < lo ? 0.f : (x > hi ? std::numeric_limits<float>::infinity() : y);
}

// Dropout's factor for key j, branch-free. Callers copy the plan into
// locals, so stores to float arrays cannot alias it and the loops vectorize.
inline float Keep(bool on, uint32_t threshold, float keep_scale, uint32_t row_state, uint32_t j) {
  return (on && !DropoutKeep(row_state, j, threshold)) ? 0.f : keep_scale;
}

}  // namespace

JAXDNN_CPU_CLONES float SoftmaxWeights(const float* x, int64_t n, float max, float* w,
                                       const DropoutPlan& drop, uint32_t row_state, uint32_t j0) {
  const bool on = drop.on;
  const uint32_t threshold = drop.threshold;
  const float keep_scale = drop.keep_scale;
  float lane[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t t = 0;
  for (; t + 8 <= n; t += 8) {
    for (int u = 0; u < 8; ++u) {
      const float e = VecExp(x[t + u] - max);
      lane[u] += e;
      w[t + u] = e * Keep(on, threshold, keep_scale, row_state, j0 + uint32_t(t + u));
    }
  }
  for (; t < n; ++t) {
    const float e = VecExp(x[t] - max);
    lane[0] += e;
    w[t] = e * Keep(on, threshold, keep_scale, row_state, j0 + uint32_t(t));
  }
  return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

JAXDNN_CPU_CLONES void PlainGradients(float* pt, float* gt, int64_t n, float scale, float lse, float delta,
                                      const DropoutPlan& drop, uint32_t row_state, uint32_t j0) {
  const bool on = drop.on;
  const uint32_t threshold = drop.threshold;
  const float keep_scale = drop.keep_scale;
  for (int64_t t = 0; t < n; ++t) {
    const float pr = VecExp(pt[t] * scale - lse);
    const float keep = Keep(on, threshold, keep_scale, row_state, j0 + uint32_t(t));
    pt[t] = pr * keep;
    gt[t] = pr * (gt[t] * keep - delta) * scale;
  }
}

}  // namespace jaxdnn::attention
