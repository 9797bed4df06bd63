// Row kernels of the cross-entropy on the CPU. The maximum passes NaN on (a
// NaN logit makes its row's loss NaN), and a +inf logit gives NaN too
// (exp(inf - inf) is in the sum), as the "xla" composition does.
#include "softmax/cpu/cross_entropy_kernels.h"

#include <cmath>
#include <limits>

#include "softmax/cpu/rows.h"

namespace jaxdnn::softmax {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// log sum exp of a row, and the plain sum of its entries.
template <typename T>
void RowStats(const T* x, int64_t cols, float* lse, float* total) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < cols; ++j) {
    m = MaxNaN(m, ToFloat(x[j]));
  }
  float s = 0.0f, t = 0.0f;
  for (int64_t j = 0; j < cols; ++j) {
    const float v = ToFloat(x[j]);
    s += std::exp(v - m);
    t += v;
  }
  *lse = m + std::log(s);
  *total = t;
}

template <typename T>
void FwdRows(const CrossEntropyFwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t cols = p.shape.cols;
  const T* x = static_cast<const T*>(p.logits);
  const float eps = p.smoothing, keep = 1.0f - p.smoothing;
  ForEachRow(p.shape, pool, [&](int64_t r) {
    const T* row = x + r * cols;
    float lse, total;
    RowStats(row, cols, &lse, &total);
    p.lse[r] = lse;
    const int32_t y = p.labels[r];
    switch (KindOf(y, cols, p.has_ignore, p.ignore_index)) {
      case LabelKind::kIgnored: p.loss[r] = 0.0f; break;
      case LabelKind::kInvalid: p.loss[r] = kNaN; break;
      case LabelKind::kValid:
        // The smoothing term only when smoothing: a -inf logit makes 0 * mean NaN.
        p.loss[r] = lse - keep * ToFloat(row[y]) - (eps != 0.0f ? eps * (total / float(cols)) : 0.0f) +
                    p.z_loss * lse * lse;
        break;
    }
  });
}

template <typename T>
void BwdRows(const CrossEntropyBwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t cols = p.shape.cols;
  const T* x = static_cast<const T*>(p.logits);
  T* dx = static_cast<T*>(p.dlogits);
  const float keep = 1.0f - p.smoothing, spread = p.smoothing / float(cols);
  ForEachRow(p.shape, pool, [&](int64_t r) {
    const int64_t off = r * cols;
    const int32_t y = p.labels[r];
    const LabelKind kind = KindOf(y, cols, p.has_ignore, p.ignore_index);
    const float g = p.g[r], lse = p.lse[r];
    const float pscale = g * (1.0f + 2.0f * p.z_loss * lse);
    for (int64_t j = 0; j < cols; ++j) {
      float out;
      if (kind == LabelKind::kIgnored) {
        out = 0.0f;
      } else if (kind == LabelKind::kInvalid) {
        out = kNaN;
      } else {
        const float prob = std::exp(ToFloat(x[off + j]) - lse);
        out = pscale * prob - g * (spread + (j == y ? keep : 0.0f));
      }
      dx[off + j] = FromFloat<T>(out);
    }
  });
}

template <typename T>
void SoftFwdRows(const SoftCrossEntropyFwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t cols = p.shape.cols;
  const T* x = static_cast<const T*>(p.logits);
  const T* q = static_cast<const T*>(p.targets);
  const float keep = 1.0f - p.smoothing, spread = p.smoothing / float(cols);
  ForEachRow(p.shape, pool, [&](int64_t r) {
    const int64_t off = r * cols;
    float lse, total;
    RowStats(x + off, cols, &lse, &total);
    float qsum = 0.0f, qx = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      const float t = ToFloat(q[off + j]);
      qsum += t;
      qx += t * ToFloat(x[off + j]);
    }
    const float s = keep * qsum + p.smoothing;
    // The smoothing term only when smoothing: a -inf logit makes 0 * sum NaN.
    const float sx = keep * qx + (p.smoothing != 0.0f ? spread * total : 0.0f);
    p.lse[r] = lse;
    p.target_sum[r] = qsum;
    p.loss[r] = lse * s - sx + p.z_loss * lse * lse;
  });
}

template <typename T>
void SoftBwdRows(const SoftCrossEntropyBwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t cols = p.shape.cols;
  const T* x = static_cast<const T*>(p.logits);
  const T* q = static_cast<const T*>(p.targets);
  T* dx = static_cast<T*>(p.dlogits);
  const float keep = 1.0f - p.smoothing, spread = p.smoothing / float(cols);
  ForEachRow(p.shape, pool, [&](int64_t r) {
    const int64_t off = r * cols;
    const float a = p.a[r], b = p.b[r], lse = p.lse[r];
    for (int64_t j = 0; j < cols; ++j) {
      const float prob = std::exp(ToFloat(x[off + j]) - lse);
      dx[off + j] = FromFloat<T>(a * prob - b * (keep * ToFloat(q[off + j]) + spread));
    }
  });
}

}  // namespace

ffi::Error SoftCrossEntropyFwdCpu(const SoftCrossEntropyFwdArgs& p, ffi::ThreadPool* pool) {
  return ByDtype(p.dtype, p.shape, "jaxdnn soft cross-entropy forward",
                 [&](auto t) { SoftFwdRows<decltype(t)>(p, pool); });
}
ffi::Error SoftCrossEntropyBwdCpu(const SoftCrossEntropyBwdArgs& p, ffi::ThreadPool* pool) {
  return ByDtype(p.dtype, p.shape, "jaxdnn soft cross-entropy backward",
                 [&](auto t) { SoftBwdRows<decltype(t)>(p, pool); });
}

ffi::Error CrossEntropyFwdCpu(const CrossEntropyFwdArgs& p, ffi::ThreadPool* pool) {
  return ByDtype(p.dtype, p.shape, "jaxdnn cross-entropy forward",
                 [&](auto t) { FwdRows<decltype(t)>(p, pool); });
}
ffi::Error CrossEntropyBwdCpu(const CrossEntropyBwdArgs& p, ffi::ThreadPool* pool) {
  return ByDtype(p.dtype, p.shape, "jaxdnn cross-entropy backward",
                 [&](auto t) { BwdRows<decltype(t)>(p, pool); });
}

}  // namespace jaxdnn::softmax
