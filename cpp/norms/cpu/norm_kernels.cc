// Row-at-a-time CPU kernels. Each row is staged once in a float32 buffer, so
// x is read once and the statistics use two passes over cached data (as the
// reference's mean-then-variance does). Rows go to XLA's intra-op threads in
// chunks whose size depends only on the shape; the backward's parameter
// gradients are summed per chunk and then over chunks in order, and sums
// use fixed lanes: deterministic whatever the threads.
#include "norms/cpu/norm_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/cpu_parallel.h"
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

// Rows per work item: at least 64, and at most 64 items.
int64_t ChunkRows(int64_t rows) { return std::max<int64_t>(64, (rows + 63) / 64); }

// n parameters as float32: float32 ones as they are, 16-bit ones (params16:
// x's dtype T) converted once per call into `buf`. Null stays null.
template <typename T>
const float* ParamsF32(const void* p, bool params16, int64_t n, std::vector<float>& buf) {
  if (p == nullptr || !params16) return static_cast<const float*>(p);
  const T* t = static_cast<const T*>(p);
  buf.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) buf[i] = ToFloat(t[i]);
  return buf.data();
}

// n float32 parameter gradients written in the parameters' dtype (rounded once).
template <typename T>
void StoreParamsF32(const float* v, bool params16, int64_t n, void* dst) {
  if (!params16) {
    std::copy(v, v + n, static_cast<float*>(dst));
    return;
  }
  T* t = static_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) t[i] = FromFloat<T>(v[i]);
}

template <typename T>
void FwdRows(const NormFwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t dim = p.shape.dim, rpg = p.shape.rows_per_group();
  const bool layer = p.kind == NormKind::kLayer;
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);
  T* y = static_cast<T*>(p.y);
  T* z = static_cast<T*>(p.z);
  const float inv_dim = 1.0f / float(dim);
  std::vector<float> scale_buf, bias_buf;
  const float* scale_f = ParamsF32<T>(p.scale, p.params16, p.shape.groups * dim, scale_buf);
  const float* bias_f = layer ? ParamsF32<T>(p.bias, p.params16, p.shape.groups * dim, bias_buf) : nullptr;
  const int64_t chunk = ChunkRows(p.shape.rows);
  ParallelFor(pool, (p.shape.rows + chunk - 1) / chunk, [&](int64_t c) {
    std::vector<float> row(dim);
    float* v = row.data();
    for (int64_t r = c * chunk; r < std::min(p.shape.rows, (c + 1) * chunk); ++r) {
      const int64_t off = r * dim;
      const float* scale = scale_f + (r / rpg) * dim;
      const float* bias = layer ? bias_f + (r / rpg) * dim : nullptr;
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
      // The mean as v[0] + mean(v - v[0]): with a large offset (1e6 + N(0, 1))
      // the shifted terms are exact and small, so no cancellation is left.
      // The centred values are (v - shift) - shifted_mean, never v - mean: a
      // float32 mean near 1e6 is itself 0.03 off.
      const float shift = layer ? v[0] : 0.0f;
      const float shifted_mean =
          layer ? LaneSum(dim, [&](int64_t j) { return v[j] - shift; }) * inv_dim : 0.0f;
      const float mean = shift + shifted_mean;
      auto centred = [&](int64_t j) { return (v[j] - shift) - shifted_mean; };
      const float var = LaneSum(dim, [&](int64_t j) { return centred(j) * centred(j); }) * inv_dim;
      const float rstd = 1.0f / std::sqrt(var + p.epsilon);
      if (layer) p.mean[r] = mean;
      p.rstd[r] = rstd;
      if (layer) {
        for (int64_t j = 0; j < dim; ++j) y[off + j] = FromFloat<T>(centred(j) * rstd * scale[j] + bias[j]);
      } else {
        for (int64_t j = 0; j < dim; ++j) y[off + j] = FromFloat<T>(v[j] * rstd * scale[j]);
      }
    }
  });
}

template <typename T>
void BwdRows(const NormBwdArgs& p, ffi::ThreadPool* pool) {
  const int64_t dim = p.shape.dim, rpg = p.shape.rows_per_group(), groups = p.shape.groups;
  const bool layer = p.kind == NormKind::kLayer;
  const T* dy = static_cast<const T*>(p.dy);
  const T* z = static_cast<const T*>(p.z);
  const T* dsum = static_cast<const T*>(p.dsum);
  T* dx = static_cast<T*>(p.dx);
  const float inv_dim = 1.0f / float(dim);
  std::vector<float> scale_buf;
  const float* scale_f = ParamsF32<T>(p.scale, p.params16, groups * dim, scale_buf);
  // Chunks never straddle a group, so each chunk's partial belongs to one.
  const int64_t chunk = ChunkRows(rpg);
  const int64_t per_group = rpg ? (rpg + chunk - 1) / chunk : 0;
  std::vector<float> partials(size_t(groups * per_group) * 2 * dim, 0.0f);
  ParallelFor(pool, groups * per_group, [&](int64_t item) {
    const int64_t group = item / per_group, c = item % per_group;
    const int64_t first = group * rpg + c * chunk, last = std::min(first + chunk, (group + 1) * rpg);
    std::vector<float> xhat_buf(dim), dy_buf(dim), g_buf(dim);
    float *xhat = xhat_buf.data(), *d = dy_buf.data(), *g = g_buf.data();
    const float* scale = scale_f + group * dim;
    float* dscale = partials.data() + item * 2 * dim;
    float* dbias = dscale + dim;
    for (int64_t r = first; r < last; ++r) {
      const int64_t off = r * dim;
      const float mean = layer ? p.mean[r] : 0.0f;
      const float rstd = p.rstd[r];
      for (int64_t j = 0; j < dim; ++j) {
        d[j] = ToFloat(dy[off + j]);
        xhat[j] = (ToFloat(z[off + j]) - mean) * rstd;
        g[j] = d[j] * scale[j];
        dscale[j] += d[j] * xhat[j];
      }
      if (layer) {
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
  });
  // Chunk partials summed in chunk order (float32), then written in the
  // parameters' dtype.
  std::vector<float> sums(2 * size_t(dim));
  for (int64_t group = 0; group < groups; ++group) {
    float* ds = sums.data();
    float* db = ds + dim;
    std::fill(sums.begin(), sums.end(), 0.0f);
    for (int64_t c = 0; c < per_group; ++c) {
      const float* part = partials.data() + (group * per_group + c) * 2 * dim;
      for (int64_t j = 0; j < dim; ++j) ds[j] += part[j];
      if (layer) {
        for (int64_t j = 0; j < dim; ++j) db[j] += part[dim + j];
      }
    }
    const int64_t off = group * dim * (p.params16 ? int64_t(sizeof(T)) : 4);
    StoreParamsF32<T>(ds, p.params16, dim, static_cast<char*>(p.dscale) + off);
    if (layer) StoreParamsF32<T>(db, p.params16, dim, static_cast<char*>(p.dbias) + off);
  }
}

template <template <typename> class Fn, typename Args>
ffi::Error Dispatch(const Args& p, ffi::ThreadPool* pool) {
  switch (p.dtype) {
    case ffi::DataType::F32: Fn<float>::Run(p, pool); break;
    case ffi::DataType::BF16: Fn<bf16_t>::Run(p, pool); break;
    case ffi::DataType::F16: Fn<f16_t>::Run(p, pool); break;
    default: return InvalidArg("jaxdnn norm", std::string("unsupported dtype ") + DtypeName(p.dtype));
  }
  return ffi::Error::Success();
}

template <typename T>
struct FwdFn {
  static void Run(const NormFwdArgs& p, ffi::ThreadPool* pool) { FwdRows<T>(p, pool); }
};
template <typename T>
struct BwdFn {
  static void Run(const NormBwdArgs& p, ffi::ThreadPool* pool) { BwdRows<T>(p, pool); }
};

}  // namespace

ffi::Error NormFwdCpu(const NormFwdArgs& p, ffi::ThreadPool* pool) { return Dispatch<FwdFn>(p, pool); }
ffi::Error NormBwdCpu(const NormBwdArgs& p, ffi::ThreadPool* pool) { return Dispatch<BwdFn>(p, pool); }

}  // namespace jaxdnn::norms
