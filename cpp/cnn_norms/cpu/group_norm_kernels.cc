// The group norm on the CPU: one work item per (sample, group), which owns
// its statistics and its channels' slice of the per-sample parameter
// gradients, so no two items write one place and results do not depend on
// the threads. Statistics in double (two passes), the rest in float32.
#include "cnn_norms/cpu/group_norm_kernels.h"

#include <cmath>
#include <string>

#include "common/activation.h"
#include "common/cpu_dispatch.h"
#include "common/cpu_parallel.h"
#include "common/host_half.h"

namespace jaxdnn::cnn_norms {
namespace {

template <typename Fn>
ffi::Error Dispatch(ffi::DataType dtype, int32_t act, const GroupShape& s, const char* op, Fn fn) {
  if (s.samples == 0 || s.channels == 0) return ffi::Error::Success();
  return ByDtypeActCpu(dtype, act, op, fn);
}

// fn(offset of entry (s, j) of the group's channels, channel) over a group.
template <typename Fn>
void ForGroup(const GroupShape& s, int64_t n, int64_t g, Fn fn) {
  const int64_t cg = s.per_group(), c0 = g * cg;
  for (int64_t pos = 0; pos < s.positions; ++pos) {
    const int64_t row = (n * s.positions + pos) * s.channels;
    for (int64_t j = 0; j < cg; ++j) fn(row + c0 + j, c0 + j);
  }
}

template <typename T, Act A>
void Forward(const GroupNormFwdArgs& p, ffi::ThreadPool* pool) {
  const GroupShape& s = p.shape;
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);
  T* y = static_cast<T*>(p.y);
  const double count = double(s.positions * s.per_group());
  ParallelFor(pool, s.samples * s.groups, [&](int64_t item) {
    const int64_t n = item / s.groups, g = item % s.groups;
    double sum = 0.0;
    ForGroup(s, n, g, [&](int64_t i, int64_t) { sum += ToFloat(x[i]); });
    const double mean = count > 0 ? sum / count : 0.0;
    double m2 = 0.0;
    ForGroup(s, n, g, [&](int64_t i, int64_t) {
      const double d = ToFloat(x[i]) - mean;
      m2 += d * d;
    });
    const float rstd = float(1.0 / std::sqrt(m2 / (count > 0 ? count : 1.0) + double(p.attrs.epsilon)));
    const float meanf = float(mean);
    p.mean[item] = meanf;
    p.rstd[item] = rstd;
    const float* scale = p.scale + n * s.channels;
    const float* bias = p.bias + n * s.channels;
    ForGroup(s, n, g, [&](int64_t i, int64_t c) {
      float z = (ToFloat(x[i]) - meanf) * rstd * scale[c] + bias[c];
      if (res) z += ToFloat(res[i]);
      y[i] = FromFloat<T>(Apply<A>(z, p.attrs.param));
    });
  });
}

template <typename T, Act A>
void Backward(const GroupNormBwdArgs& p, ffi::ThreadPool* pool) {
  const GroupShape& s = p.shape;
  const T* dy = static_cast<const T*>(p.dy);
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);
  T* dx = static_cast<T*>(p.dx);
  T* dres = static_cast<T*>(p.dresidual);
  const float count = float(s.positions * s.per_group());
  ParallelFor(pool, s.samples * s.groups, [&](int64_t item) {
    const int64_t n = item / s.groups, g = item % s.groups;
    const float mean = p.mean[item], rstd = p.rstd[item];
    const float* scale = p.scale + n * s.channels;
    const float* bias = p.bias + n * s.channels;
    float* dscale = p.dscale + n * s.channels;
    float* dbias = p.dbias + n * s.channels;
    const int64_t c0 = g * s.per_group();
    for (int64_t c = c0; c < c0 + s.per_group(); ++c) dscale[c] = dbias[c] = 0.0f;
    // dz (the residual's gradient), the parameter sums and the group's two
    // means; dz is recomputed in the second pass rather than stored.
    auto dz_at = [&](int64_t i, int64_t c, float* xhat) {
      *xhat = (ToFloat(x[i]) - mean) * rstd;
      float z = *xhat * scale[c] + bias[c];
      if (res) z += ToFloat(res[i]);
      return Backprop<A>(z, ToFloat(dy[i]), p.attrs.param);
    };
    double sum_g = 0.0, sum_gx = 0.0;
    ForGroup(s, n, g, [&](int64_t i, int64_t c) {
      float xhat;
      const float dz = dz_at(i, c, &xhat);
      if (dres) dres[i] = FromFloat<T>(dz);
      dscale[c] += dz * xhat;
      dbias[c] += dz;
      const float dxhat = dz * scale[c];
      sum_g += dxhat;
      sum_gx += double(dxhat) * xhat;
    });
    const float mean_g = count > 0 ? float(sum_g / count) : 0.0f;
    const float mean_gx = count > 0 ? float(sum_gx / count) : 0.0f;
    ForGroup(s, n, g, [&](int64_t i, int64_t c) {
      float xhat;
      const float dxhat = dz_at(i, c, &xhat) * scale[c];
      dx[i] = FromFloat<T>(rstd * (dxhat - mean_g - xhat * mean_gx));
    });
  });
}

}  // namespace

ffi::Error GroupNormFwdCpu(const GroupNormFwdArgs& p, ffi::ThreadPool* pool) {
  return Dispatch(p.dtype, p.attrs.act, p.shape, "jaxdnn group_norm forward",
                  [&](auto t, auto a) { Forward<decltype(t), decltype(a)::value>(p, pool); });
}

ffi::Error GroupNormBwdCpu(const GroupNormBwdArgs& p, ffi::ThreadPool* pool) {
  return Dispatch(p.dtype, p.attrs.act, p.shape, "jaxdnn group_norm backward",
                  [&](auto t, auto a) { Backward<decltype(t), decltype(a)::value>(p, pool); });
}

}  // namespace jaxdnn::cnn_norms
