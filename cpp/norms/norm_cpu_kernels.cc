// Row-at-a-time CPU kernels. Each row is staged once in a float32 buffer, so
// x is read once and the statistics use two passes over cached data (as the
// reference's mean-then-variance does). Parameter gradients accumulate per
// group in a fixed row order, so results are deterministic.
#include "norms/norm_cpu_kernels.h"

#include <cmath>
#include <vector>

#include "common/host_half.h"

namespace jaxdnn::norms {
namespace {

template <typename T>
void FwdRows(const NormFwdArgs& p) {
  const int64_t dim = p.shape.dim, rpg = p.shape.rows_per_group();
  const bool layer = p.kind == NormKind::kLayer;
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);
  T* y = static_cast<T*>(p.y);
  T* z = static_cast<T*>(p.z);
  std::vector<float> row(dim);
  for (int64_t r = 0; r < p.shape.rows; ++r) {
    const int64_t off = r * dim;
    const float* scale = p.scale + (r / rpg) * dim;
    const float* bias = layer ? p.bias + (r / rpg) * dim : nullptr;
    for (int64_t j = 0; j < dim; ++j) {
      float v = ToFloat(x[off + j]);
      if (res) {
        // The sum is rounded to the input dtype before it is normalized,
        // exactly as the residual stream that is returned.
        const T s = FromFloat<T>(v + ToFloat(res[off + j]));
        z[off + j] = s;
        v = ToFloat(s);
      }
      row[j] = v;
    }
    double mean = 0.0;
    if (layer) {
      for (int64_t j = 0; j < dim; ++j) mean += row[j];
      mean /= double(dim);
    }
    double sq = 0.0;
    for (int64_t j = 0; j < dim; ++j) {
      const double d = double(row[j]) - mean;
      sq += d * d;
    }
    const float m = float(mean);
    const float rstd = 1.0f / std::sqrt(float(sq / double(dim)) + p.epsilon);
    if (layer) p.mean[r] = m;
    p.rstd[r] = rstd;
    for (int64_t j = 0; j < dim; ++j) {
      float out = (row[j] - m) * rstd * scale[j];
      if (layer) out += bias[j];
      y[off + j] = FromFloat<T>(out);
    }
  }
}

template <typename T>
void BwdRows(const NormBwdArgs& p) {
  const int64_t dim = p.shape.dim, rpg = p.shape.rows_per_group();
  const bool layer = p.kind == NormKind::kLayer;
  const T* dy = static_cast<const T*>(p.dy);
  const T* z = static_cast<const T*>(p.z);
  const T* dsum = static_cast<const T*>(p.dsum);
  T* dx = static_cast<T*>(p.dx);
  const int64_t params = p.shape.groups * dim;
  for (int64_t i = 0; i < params; ++i) {
    p.dscale[i] = 0.0f;
    if (layer) p.dbias[i] = 0.0f;
  }
  std::vector<float> xhat(dim), g(dim);
  for (int64_t r = 0; r < p.shape.rows; ++r) {
    const int64_t off = r * dim, goff = (r / rpg) * dim;
    const float mean = layer ? p.mean[r] : 0.0f;
    const float rstd = p.rstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t j = 0; j < dim; ++j) {
      const float d = ToFloat(dy[off + j]);
      xhat[j] = (ToFloat(z[off + j]) - mean) * rstd;
      g[j] = d * p.scale[goff + j];
      sum_g += g[j];
      sum_gx += double(g[j]) * xhat[j];
      p.dscale[goff + j] += d * xhat[j];
      if (layer) p.dbias[goff + j] += d;
    }
    const float mg = layer ? float(sum_g / double(dim)) : 0.0f;
    const float mgx = float(sum_gx / double(dim));
    for (int64_t j = 0; j < dim; ++j) {
      float v = rstd * (g[j] - mg - xhat[j] * mgx);
      if (dsum) v += ToFloat(dsum[off + j]);
      dx[off + j] = FromFloat<T>(v);
    }
  }
}

template <template <typename> class Fn, typename Args>
ffi::Error Dispatch(const Args& p) {
  switch (p.dtype) {
    case ffi::DataType::F32: Fn<float>::Run(p); break;
    case ffi::DataType::BF16: Fn<bf16_t>::Run(p); break;
    case ffi::DataType::F16: Fn<f16_t>::Run(p); break;
    default: return InvalidArg("jaxdnn norm", std::string("unsupported dtype ") + DtypeName(p.dtype));
  }
  return ffi::Error::Success();
}

template <typename T> struct FwdFn { static void Run(const NormFwdArgs& p) { FwdRows<T>(p); } };
template <typename T> struct BwdFn { static void Run(const NormBwdArgs& p) { BwdRows<T>(p); } };

}  // namespace

ffi::Error NormFwdCpu(const NormFwdArgs& p) { return Dispatch<FwdFn>(p); }
ffi::Error NormBwdCpu(const NormBwdArgs& p) { return Dispatch<BwdFn>(p); }

}  // namespace jaxdnn::norms
