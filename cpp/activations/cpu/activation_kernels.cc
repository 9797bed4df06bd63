// bias_act and glu on the CPU: rows in work items over XLA's threads, the
// activation a template parameter so each inner loop is straight-line code.
// The bias gradient sums each item's rows into its own float32 partial row,
// then adds the partials in item order: the same bits whatever the threads.
#include "activations/cpu/activation_kernels.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/activation.h"
#include "common/cpu_dispatch.h"
#include "common/cpu_parallel.h"
#include "common/host_half.h"

namespace jaxdnn::activations {
namespace {

// Rows per work item: about 64K elements, at least one row.
int64_t RowsPerItem(const Shape& s) {
  return std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, s.cols));
}

template <typename Fn>
ffi::Error Dispatch(ffi::DataType dtype, int32_t act, const Shape& s, const char* op, Fn fn) {
  if (s.rows == 0 || s.cols == 0) return ffi::Error::Success();
  return ByDtypeActCpu(dtype, act, op, fn);
}

template <typename T, Act A>
void BiasActFwd(const BiasActFwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t cols = p.shape.cols, per = RowsPerItem(p.shape);
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  ParallelFor(pool, (p.shape.rows + per - 1) / per, [&](int64_t item) {
    const int64_t last = std::min(p.shape.rows, (item + 1) * per);
    for (int64_t i = item * per * cols; i < last * cols; i += cols) {
      for (int64_t j = 0; j < cols; ++j) {
        const float v = ToFloat(x[i + j]) + (p.bias ? p.bias[j] : 0.0f);
        y[i + j] = FromFloat<T>(Apply<A>(v, p.param));
      }
    }
  });
}

template <typename T, Act A>
void BiasActBwd(const BiasActBwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t cols = p.shape.cols, per = RowsPerItem(p.shape);
  const int64_t items = (p.shape.rows + per - 1) / per;
  const T* dy = static_cast<const T*>(p.dy);
  const T* x = static_cast<const T*>(p.x);
  T* dx = static_cast<T*>(p.dx);
  std::vector<float> partials(p.bias ? size_t(items * cols) : 0, 0.0f);
  ParallelFor(pool, items, [&](int64_t item) {
    float* part = p.bias ? partials.data() + item * cols : nullptr;
    const int64_t last = std::min(p.shape.rows, (item + 1) * per);
    for (int64_t i = item * per * cols; i < last * cols; i += cols) {
      for (int64_t j = 0; j < cols; ++j) {
        const float v = ToFloat(x[i + j]) + (p.bias ? p.bias[j] : 0.0f);
        const float d = Backprop<A>(v, ToFloat(dy[i + j]), p.param);
        dx[i + j] = FromFloat<T>(d);
        if (part) part[j] += d;
      }
    }
  });
  if (!p.bias) return;
  std::fill(p.dbias, p.dbias + cols, 0.0f);
  for (int64_t item = 0; item < items; ++item) {
    for (int64_t j = 0; j < cols; ++j) p.dbias[j] += partials[item * cols + j];
  }
}

template <typename T, Act A>
void GluFwd(const GluFwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t cols = p.shape.cols, per = RowsPerItem(p.shape);
  const T* value = static_cast<const T*>(p.value);
  const T* gate = static_cast<const T*>(p.gate);
  T* out = static_cast<T*>(p.out);
  ParallelFor(pool, (p.shape.rows + per - 1) / per, [&](int64_t item) {
    const int64_t last = std::min(p.shape.rows, (item + 1) * per);
    for (int64_t r = item * per; r < last; ++r) {
      const int64_t in = r * p.in_stride, o = r * cols;
      for (int64_t j = 0; j < cols; ++j) {
        out[o + j] = FromFloat<T>(ToFloat(value[in + j]) * Apply<A>(ToFloat(gate[in + j]), p.param));
      }
    }
  });
}

template <typename T, Act A>
void GluBwd(const GluBwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t cols = p.shape.cols, per = RowsPerItem(p.shape);
  const T* dout = static_cast<const T*>(p.dout);
  const T* value = static_cast<const T*>(p.value);
  const T* gate = static_cast<const T*>(p.gate);
  T* dvalue = static_cast<T*>(p.dvalue);
  T* dgate = static_cast<T*>(p.dgate);
  ParallelFor(pool, (p.shape.rows + per - 1) / per, [&](int64_t item) {
    const int64_t last = std::min(p.shape.rows, (item + 1) * per);
    for (int64_t r = item * per; r < last; ++r) {
      const int64_t in = r * p.in_stride, o = r * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const float g = ToFloat(dout[o + j]), v = ToFloat(value[in + j]), z = ToFloat(gate[in + j]);
        dvalue[in + j] = FromFloat<T>(g * Apply<A>(z, p.param));
        dgate[in + j] = FromFloat<T>(Backprop<A>(z, g * v, p.param));
      }
    }
  });
}

}  // namespace

ffi::Error BiasActFwdCpu(const BiasActFwdArgs& p, ffi::ThreadPool* pool) {
  return Dispatch(p.dtype, p.act, p.shape, "jaxdnn bias_act forward",
                  [&](auto t, auto a) { BiasActFwd<decltype(t), decltype(a)::value>(p, pool); });
}
ffi::Error BiasActBwdCpu(const BiasActBwdArgs& p, ffi::ThreadPool* pool) {
  if (p.bias && p.shape.rows == 0) std::fill(p.dbias, p.dbias + p.shape.cols, 0.0f);
  return Dispatch(p.dtype, p.act, p.shape, "jaxdnn bias_act backward",
                  [&](auto t, auto a) { BiasActBwd<decltype(t), decltype(a)::value>(p, pool); });
}
ffi::Error GluFwdCpu(const GluFwdArgs& p, ffi::ThreadPool* pool) {
  return Dispatch(p.dtype, p.act, p.shape, "jaxdnn glu forward",
                  [&](auto t, auto a) { GluFwd<decltype(t), decltype(a)::value>(p, pool); });
}
ffi::Error GluBwdCpu(const GluBwdArgs& p, ffi::ThreadPool* pool) {
  return Dispatch(p.dtype, p.act, p.shape, "jaxdnn glu backward",
                  [&](auto t, auto a) { GluBwd<decltype(t), decltype(a)::value>(p, pool); });
}

}  // namespace jaxdnn::activations
