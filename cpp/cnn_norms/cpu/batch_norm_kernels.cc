// The BatchNorm steps on the CPU. Column sums run over fixed chunks of rows,
// one work item each writing its own partial rows, added in chunk order in
// double: the same bits whatever the threads. The elementwise steps run
// over the same chunks.
#include "cnn_norms/cpu/batch_norm_kernels.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/activation.h"
#include "common/cpu_dispatch.h"
#include "common/cpu_parallel.h"
#include "common/host_half.h"

namespace jaxdnn::cnn_norms {
namespace {

constexpr int64_t kChunkRows = 256;

// row_fn(r, part1, part2) over every row, per chunk, then the chunks'
// float partials summed in chunk order (double) into sum1, sum2.
template <typename RowFn>
void ColumnSums(const BatchNormArgs& p, ffi::ThreadPool* pool, RowFn row_fn) {
  const int64_t rows = p.shape.rows, cols = p.shape.channels;
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  std::vector<float> parts(size_t(chunks * 2 * cols), 0.0f);
  ParallelFor(pool, chunks, [&](int64_t k) {
    float* a = parts.data() + k * 2 * cols;
    for (int64_t r = k * kChunkRows; r < std::min(rows, (k + 1) * kChunkRows); ++r) row_fn(r, a, a + cols);
  });
  for (int64_t c = 0; c < cols; ++c) {
    double s1 = 0.0, s2 = 0.0;
    for (int64_t k = 0; k < chunks; ++k) {
      s1 += parts[k * 2 * cols + c];
      s2 += parts[k * 2 * cols + cols + c];
    }
    p.out1[c] = float(s1);
    p.out2[c] = float(s2);
  }
}

template <typename RowFn>
void EachRow(const BatchNormArgs& p, ffi::ThreadPool* pool, RowFn row_fn) {
  const int64_t rows = p.shape.rows;
  ParallelFor(pool, (rows + kChunkRows - 1) / kChunkRows, [&](int64_t k) {
    for (int64_t r = k * kChunkRows; r < std::min(rows, (k + 1) * kChunkRows); ++r) row_fn(r);
  });
}

template <typename T, Act A>
void Run(BatchNormStep step, const BatchNormArgs& p, ffi::ThreadPool* pool) {
  const int64_t cols = p.shape.channels;
  const T* x = static_cast<const T*>(p.x);
  const T* dy = static_cast<const T*>(p.dy);
  const T* res = static_cast<const T*>(p.residual);
  const float param = p.attrs.param;
  std::vector<ChannelStats> st;
  if (step != BatchNormStep::kStats) {
    st.resize(size_t(cols));
    for (int64_t c = 0; c < cols; ++c) st[c] = StatsOf(p, c);
  }
  // The pre-activation z and xhat of entry (r, c).
  auto pre = [&](int64_t i, int64_t c, float* xhat) {
    *xhat = (ToFloat(x[i]) - st[c].mean) * st[c].rstd;
    float z = *xhat * p.scale[c] + p.bias[c];
    return res ? z + ToFloat(res[i]) : z;
  };
  // dz of entry i: from the forward's ReLU sign bits where given, else
  // through z recomputed.
  auto dz_of = [&](int64_t i, int64_t c, float* xhat) {
    if (!p.mask) return Backprop<A>(pre(i, c, xhat), ToFloat(dy[i]), param);
    *xhat = (ToFloat(x[i]) - st[c].mean) * st[c].rstd;
    return (p.mask[i / 8] >> (i % 8)) & 1 ? ToFloat(dy[i]) : 0.0f;
  };
  switch (step) {
    case BatchNormStep::kStats:
      ColumnSums(p, pool, [&](int64_t r, float* s1, float* s2) {
        for (int64_t c = 0; c < cols; ++c) {
          const float d = ToFloat(x[r * cols + c]) - p.shift[c];
          s1[c] += d;
          s2[c] += d * d;
        }
      });
      break;
    case BatchNormStep::kApply: {
      T* y = static_cast<T*>(p.y);
      const float m = p.attrs.momentum;
      for (int64_t c = 0; c < cols; ++c) {  // the running statistics, Flax's update
        p.out1[c] = p.attrs.training ? m * p.shift[c] + (1.f - m) * st[c].mean : p.shift[c];
        p.out2[c] = p.attrs.training ? m * p.running_var[c] + (1.f - m) * st[c].var : p.running_var[c];
      }
      EachRow(p, pool, [&](int64_t r) {
        for (int64_t c = 0; c < cols; ++c) {
          float xhat;
          const float z = pre(r * cols + c, c, &xhat);
          y[r * cols + c] = FromFloat<T>(Apply<A>(z, param));
          if (!p.mask_out) continue;
          uint8_t& bits = p.mask_out[(r * cols + c) / 8];
          if (c % 8 == 0) bits = 0;
          bits |= uint8_t(z > 0.0f) << (c % 8);
        }
      });
      break;
    }
    case BatchNormStep::kBwdReduce:
      ColumnSums(p, pool, [&](int64_t r, float* s1, float* s2) {
        for (int64_t c = 0; c < cols; ++c) {
          float xhat;
          const int64_t i = r * cols + c;
          const float dz = dz_of(i, c, &xhat);
          s1[c] += dz;
          s2[c] += dz * xhat;
        }
      });
      break;
    case BatchNormStep::kBwdApply: {
      T* dx = static_cast<T*>(p.y);
      T* dres = static_cast<T*>(p.dresidual);
      EachRow(p, pool, [&](int64_t r) {
        for (int64_t c = 0; c < cols; ++c) {
          float xhat;
          const int64_t i = r * cols + c;
          const float dz = dz_of(i, c, &xhat);
          if (dres) dres[i] = FromFloat<T>(dz);
          const float g = st[c].rstd * p.scale[c];
          dx[i] = FromFloat<T>(
              p.attrs.training ? g * (dz - p.total_dz[c] / p.count[c] - xhat * (p.total_dzx[c] / p.count[c]))
                               : g * dz);
        }
      });
      break;
    }
  }
}

}  // namespace

ffi::Error BatchNormCpu(BatchNormStep step, const BatchNormArgs& p, ffi::ThreadPool* pool) {
  if (p.shape.channels == 0) return ffi::Error::Success();
  if (p.shape.rows == 0 && (step == BatchNormStep::kStats || step == BatchNormStep::kBwdReduce)) {
    std::fill(p.out1, p.out1 + p.shape.channels, 0.0f);
    std::fill(p.out2, p.out2 + p.shape.channels, 0.0f);
    return ffi::Error::Success();
  }
  return ByDtypeActCpu(p.dtype, p.attrs.act, "jaxdnn batch_norm",
                       [&](auto t, auto a) { Run<decltype(t), decltype(a)::value>(step, p, pool); });
}

}  // namespace jaxdnn::cnn_norms
