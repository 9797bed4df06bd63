// Row kernels of the softmax family on the CPU (formulas in softmax/problem.h).
// The maximum passes NaN on, as jnp.max does, so a NaN entry makes its row NaN.
#include "softmax/cpu/softmax_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/cpu_parallel.h"
#include "common/host_half.h"

namespace jaxdnn::softmax {
namespace {

// Rows per work item: about 64K elements, at least one row.
int64_t ChunkRows(const SoftmaxShape& s) {
  return std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, s.cols));
}

template <typename T>
void FwdRows(const SoftmaxFwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t cols = p.shape.cols, chunk = ChunkRows(p.shape);
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  const bool* where = p.where;
  const float inf = std::numeric_limits<float>::infinity();
  ParallelFor(pool, (p.shape.rows + chunk - 1) / chunk, [&](int64_t c) {
    const int64_t last = std::min(p.shape.rows, (c + 1) * chunk);
    for (int64_t r = c * chunk; r < last; ++r) {
      const int64_t off = r * cols;
      auto kept = [&](int64_t j) { return where == nullptr || where[off + j]; };
      float m = -inf;
      for (int64_t j = 0; j < cols; ++j) {
        const float v = ToFloat(x[off + j]);
        if (kept(j) && (std::isnan(v) || v > m)) m = std::isnan(m) ? m : v;
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
    }
  });
}

template <typename T>
void BwdRows(const SoftmaxBwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t cols = p.shape.cols, chunk = ChunkRows(p.shape);
  const T* y = static_cast<const T*>(p.y);
  const T* dy = static_cast<const T*>(p.dy);
  T* dx = static_cast<T*>(p.dx);
  const bool* where = p.where;
  ParallelFor(pool, (p.shape.rows + chunk - 1) / chunk, [&](int64_t c) {
    const int64_t last = std::min(p.shape.rows, (c + 1) * chunk);
    for (int64_t r = c * chunk; r < last; ++r) {
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
    }
  });
}

template <template <typename> class Fn, typename Args>
ffi::Error Dispatch(const Args& p, ffi::ThreadPool* pool, const char* op) {
  if (p.shape.rows == 0 || p.shape.cols == 0) return ffi::Error::Success();
  switch (p.dtype) {
    case ffi::DataType::F32: Fn<float>::Run(p, pool); break;
    case ffi::DataType::BF16: Fn<bf16_t>::Run(p, pool); break;
    case ffi::DataType::F16: Fn<f16_t>::Run(p, pool); break;
    default: return InvalidArg(op, std::string("unsupported dtype ") + DtypeName(p.dtype));
  }
  return ffi::Error::Success();
}

template <typename T>
struct FwdFn {
  static void Run(const SoftmaxFwdArgs& p, ffi::ThreadPool* pool) { FwdRows<T>(p, pool); }
};
template <typename T>
struct BwdFn {
  static void Run(const SoftmaxBwdArgs& p, ffi::ThreadPool* pool) { BwdRows<T>(p, pool); }
};

}  // namespace

ffi::Error SoftmaxFwdCpu(const SoftmaxFwdArgs& p, ffi::ThreadPool* pool) {
  return Dispatch<FwdFn>(p, pool, "jaxdnn softmax forward");
}
ffi::Error SoftmaxBwdCpu(const SoftmaxBwdArgs& p, ffi::ThreadPool* pool) {
  return Dispatch<BwdFn>(p, pool, "jaxdnn softmax backward");
}

}  // namespace jaxdnn::softmax
