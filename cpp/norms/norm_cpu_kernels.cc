// Row-at-a-time CPU kernels. Each row is staged once in a float32 buffer, so
// x is read once and the statistics use two passes over cached data (as the
// reference's mean-then-variance does). Parameter gradients accumulate per
// group in a fixed row order, and sums use fixed lanes: deterministic.
#include "norms/norm_cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/host_half.h"

namespace jaxdnn::norms {
namespace {

// Sums in 8 independent lanes (which the compiler vectorizes without
// reassociating anything), combined in a fixed order: fast and deterministic.
constexpr int kLanes = 8;

template <typename F>
float LaneSum(int64_t n, F&& term) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += term(j + l);
  }
  for (; j < n; ++j) lanes[0] += term(j);
  float total = 0.0f;
  for (int l = 0; l < kLanes; ++l) total += lanes[l];
  return total;
}

template <typename T>
void FwdRows(const NormFwdArgs& p) {
  const int64_t dim = p.shape.dim, rpg = p.shape.rows_per_group();
  const bool layer = p.kind == NormKind::kLayer;
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);
  T* y = static_cast<T*>(p.y);
  T* z = static_cast<T*>(p.z);
  std::vector<float> row(dim);
  float* v = row.data();
  const float inv_dim = 1.0f / float(dim);
  for (int64_t r = 0; r < p.shape.rows; ++r) {
    const int64_t off = r * dim;
    const float* scale = p.scale + (r / rpg) * dim;
    const float* bias = layer ? p.bias + (r / rpg) * dim : nullptr;
    if (res) {
      for (int64_t j = 0; j < dim; ++j) {
        // The sum is rounded to the input dtype before it is normalized,
        // exactly as the residual stream that is returned.
        const T sum = FromFloat<T>(ToFloat(x[off + j]) + ToFloat(res[off + j]));
        z[off + j] = sum;
        v[j] = ToFloat(sum);
      }
    } else {
      for (int64_t j = 0; j < dim; ++j) v[j] = ToFloat(x[off + j]);
    }
    const float mean = layer ? LaneSum(dim, [&](int64_t j) { return v[j]; }) * inv_dim : 0.0f;
    const float var = LaneSum(dim, [&](int64_t j) { return (v[j] - mean) * (v[j] - mean); }) * inv_dim;
    const float rstd = 1.0f / std::sqrt(var + p.epsilon);
    if (layer) p.mean[r] = mean;
    p.rstd[r] = rstd;
    if (layer) {
      for (int64_t j = 0; j < dim; ++j) y[off + j] = FromFloat<T>((v[j] - mean) * rstd * scale[j] + bias[j]);
    } else {
      for (int64_t j = 0; j < dim; ++j) y[off + j] = FromFloat<T>(v[j] * rstd * scale[j]);
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
  std::fill(p.dscale, p.dscale + p.shape.groups * dim, 0.0f);
  if (layer) std::fill(p.dbias, p.dbias + p.shape.groups * dim, 0.0f);
  std::vector<float> xhat_buf(dim), dy_buf(dim), g_buf(dim);
  float *xhat = xhat_buf.data(), *d = dy_buf.data(), *g = g_buf.data();
  const float inv_dim = 1.0f / float(dim);
  for (int64_t r = 0; r < p.shape.rows; ++r) {
    const int64_t off = r * dim, goff = (r / rpg) * dim;
    const float mean = layer ? p.mean[r] : 0.0f;
    const float rstd = p.rstd[r];
    const float* scale = p.scale + goff;
    float* dscale = p.dscale + goff;
    for (int64_t j = 0; j < dim; ++j) {
      d[j] = ToFloat(dy[off + j]);
      xhat[j] = (ToFloat(z[off + j]) - mean) * rstd;
      g[j] = d[j] * scale[j];
      dscale[j] += d[j] * xhat[j];
    }
    if (layer) {
      float* dbias = p.dbias + goff;
      for (int64_t j = 0; j < dim; ++j) dbias[j] += d[j];
    }
    const float mg = layer ? LaneSum(dim, [&](int64_t j) { return g[j]; }) * inv_dim : 0.0f;
    const float mgx = LaneSum(dim, [&](int64_t j) { return g[j] * xhat[j]; }) * inv_dim;
    for (int64_t j = 0; j < dim; ++j) {
      float out = rstd * (g[j] - mg - xhat[j] * mgx);
      if (dsum) out += ToFloat(dsum[off + j]);
      dx[off + j] = FromFloat<T>(out);
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
