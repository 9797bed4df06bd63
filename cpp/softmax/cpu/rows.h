// Row plumbing shared by the family's CPU kernels: rows over XLA's intra-op
// threads, the dtype dispatch, and jnp.max's NaN-passing maximum.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "common/cpu_dispatch.h"
#include "common/cpu_parallel.h"
#include "common/host_half.h"
#include "softmax/problem.h"

namespace jaxdnn::softmax {

// row(r) for every row, in work items of about 64K elements (at least one
// row); each row is independent, so results do not depend on the threads.
template <typename Row>
void ForEachRow(const SoftmaxShape& s, ffi::ThreadPool* pool, Row row) {
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, s.cols));
  ParallelFor(pool, (s.rows + chunk - 1) / chunk, [&](int64_t c) {
    const int64_t last = std::min(s.rows, (c + 1) * chunk);
    for (int64_t r = c * chunk; r < last; ++r) row(r);
  });
}

// The running maximum m after v, NaN from the first NaN on (as jnp.max).
inline float MaxNaN(float m, float v) { return (std::isnan(v) || v > m) && !std::isnan(m) ? v : m; }

// fn(T{}) with T the element type of `dtype`; nothing for an empty problem.
template <typename Fn>
ffi::Error ByDtype(ffi::DataType dtype, const SoftmaxShape& s, const char* op, Fn fn) {
  if (s.rows == 0 || s.cols == 0) return ffi::Error::Success();
  return ByDtypeCpu(dtype, op, fn);
}

}  // namespace jaxdnn::softmax
