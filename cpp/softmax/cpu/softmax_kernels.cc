// Row kernels of the softmax family on the CPU (formulas in softmax/problem.h).
// The maximum passes NaN on, as jnp.max does, so a NaN entry makes its row NaN.
#include "softmax/cpu/softmax_kernels.h"

#include <cmath>
#include <limits>

#include "softmax/cpu/rows.h"

namespace jaxdnn::softmax {
namespace {

template <typename T>
void FwdRows(const SoftmaxFwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t cols = p.shape.cols;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  const bool* where = p.where;
  const float inf = std::numeric_limits<float>::infinity();
  ForEachRow(p.shape, pool, [&](int64_t r) {
    const int64_t off = r * cols;
    auto kept = [&](int64_t j) { return where == nullptr || where[off + j]; };
    float m = -inf;
    for (int64_t j = 0; j < cols; ++j) {
      if (kept(j)) m = MaxNaN(m, ToFloat(x[off + j]));
    }
    float s = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      if (kept(j)) s += std::exp(ToFloat(x[off + j]) - m);
    }
    const float inv = 1.0f / s, log_s = std::log(s);
    for (int64_t j = 0; j < cols; ++j) {
      const float d = ToFloat(x[off + j]) - m;
      float out;
      if (p.log) {
        out = kept(j) ? d - log_s : -inf;
      } else {
        out = kept(j) ? std::exp(d) * inv : 0.0f;
      }
      y[off + j] = FromFloat<T>(out);
    }
  });
}

template <typename T>
void BwdRows(const SoftmaxBwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t cols = p.shape.cols;
  const T* y = static_cast<const T*>(p.y);
  const T* dy = static_cast<const T*>(p.dy);
  T* dx = static_cast<T*>(p.dx);
  const bool* where = p.where;
  ForEachRow(p.shape, pool, [&](int64_t r) {
    const int64_t off = r * cols;
    auto kept = [&](int64_t j) { return where == nullptr || where[off + j]; };
    // softmax: sum(dy * y); log-softmax: sum(dy).
    float dot = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      if (kept(j)) dot += p.log ? ToFloat(dy[off + j]) : ToFloat(dy[off + j]) * ToFloat(y[off + j]);
    }
    for (int64_t j = 0; j < cols; ++j) {
      const float g = ToFloat(dy[off + j]), v = ToFloat(y[off + j]);
      const float out = !kept(j) ? 0.0f : p.log ? g - std::exp(v) * dot : v * (g - dot);
      dx[off + j] = FromFloat<T>(out);
    }
  });
}

}  // namespace

ffi::Error SoftmaxFwdCpu(const SoftmaxFwdArgs& p, ffi::ThreadPool* pool) {
  return ByDtype(p.dtype, p.shape, "jaxdnn softmax forward", [&](auto t) { FwdRows<decltype(t)>(p, pool); });
}
ffi::Error SoftmaxBwdCpu(const SoftmaxBwdArgs& p, ffi::ThreadPool* pool) {
  return ByDtype(p.dtype, p.shape, "jaxdnn softmax backward", [&](auto t) { BwdRows<decltype(t)>(p, pool); });
}

}  // namespace jaxdnn::softmax
