// Pooling on the CPU. The forward runs one work item per (sample, output
// position), all channels of it; the backward one per sample (its windows
// overlap), adding in output order, so the gradient's bits never depend on
// the threads. float32 arithmetic, rounded once to the dtype.
#include "pooling/cpu/pool_kernels.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/cpu_dispatch.h"
#include "common/cpu_parallel.h"
#include "common/host_half.h"

namespace jaxdnn::pooling {
namespace {

// fn(flat input position) for the window of output position `o` (flat), in
// window order, skipping padding; returns how many positions the window has
// inside the input.
template <typename Fn>
int64_t ForWindow(const PoolGeometry& g, int64_t o, Fn fn) {
  const int64_t od[3] = {o / (g.out[2] * g.out[1]), (o / g.out[2]) % g.out[1], o % g.out[2]};
  // Per dim: the first input, the step, and how many window positions.
  int64_t first[3], step[3], count[3];
  for (int k = 0; k < 3; ++k) {
    if (g.adaptive) {
      int64_t last;
      AdaptiveSpan(od[k], g.in[k], g.out[k], &first[k], &last);
      step[k] = 1;
      count[k] = last - first[k];
    } else {
      first[k] = od[k] * g.stride[k] - g.pad_lo[k];
      step[k] = g.dilation[k];
      count[k] = g.window[k];
    }
  }
  int64_t inside = 0;
  for (int64_t j0 = 0; j0 < count[0]; ++j0) {
    const int64_t i0 = first[0] + j0 * step[0];
    if (i0 < 0 || i0 >= g.in[0]) continue;
    for (int64_t j1 = 0; j1 < count[1]; ++j1) {
      const int64_t i1 = first[1] + j1 * step[1];
      if (i1 < 0 || i1 >= g.in[1]) continue;
      for (int64_t j2 = 0; j2 < count[2]; ++j2) {
        const int64_t i2 = first[2] + j2 * step[2];
        if (i2 < 0 || i2 >= g.in[2]) continue;
        fn((i0 * g.in[1] + i1) * g.in[2] + i2);
        ++inside;
      }
    }
  }
  return inside;
}

float Divisor(const PoolGeometry& g, int64_t inside) {
  return g.count_include_pad && !g.adaptive ? float(g.window[0] * g.window[1] * g.window[2]) : float(inside);
}

template <typename T>
void Forward(const PoolFwdArgs& p, ffi::ThreadPool* pool) {
  const PoolGeometry& g = p.g;
  const int64_t c = g.channels, inp = g.in_positions(), outp = g.out_positions();
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  ParallelFor(pool, g.batch * outp, [&](int64_t item) {
    const int64_t n = item / outp, o = item % outp;
    const T* xs = x + n * inp * c;
    std::vector<float> acc(size_t(c), g.max ? -std::numeric_limits<float>::infinity() : 0.0f);
    std::vector<int32_t> arg(size_t(g.max ? c : 0), -1);  // also without an index: the first max wins
    const int64_t inside = ForWindow(g, o, [&](int64_t i) {
      for (int64_t ch = 0; ch < c; ++ch) {
        const float v = ToFloat(xs[i * c + ch]);
        if (!g.max) {
          acc[ch] += v;
        } else if (!std::isnan(acc[ch]) && (v > acc[ch] || std::isnan(v) || arg[ch] < 0)) {
          acc[ch] = v;  // the first maximum (and the first NaN) wins
          arg[ch] = int32_t(i);
        }
      }
    });
    const float div = g.max ? 1.0f : Divisor(g, inside);
    for (int64_t ch = 0; ch < c; ++ch) {
      y[(n * outp + o) * c + ch] = FromFloat<T>(g.max ? acc[ch] : acc[ch] / div);
      if (p.index != nullptr) p.index[(n * outp + o) * c + ch] = arg[ch];
    }
  });
}

template <typename T>
void Backward(const PoolBwdArgs& p, ffi::ThreadPool* pool) {
  const PoolGeometry& g = p.g;
  const int64_t c = g.channels, inp = g.in_positions(), outp = g.out_positions();
  const T* dy = static_cast<const T*>(p.dy);
  T* dx = static_cast<T*>(p.dx);
  ParallelFor(pool, g.batch, [&](int64_t n) {
    std::vector<float> acc(size_t(inp * c), 0.0f);
    for (int64_t o = 0; o < outp; ++o) {
      const int64_t row = (n * outp + o) * c;
      if (g.max) {
        for (int64_t ch = 0; ch < c; ++ch) {
          const int32_t i = p.index[row + ch];
          if (i >= 0) acc[i * c + ch] += ToFloat(dy[row + ch]);
        }
      } else {
        const int64_t inside = ForWindow(g, o, [](int64_t) {});
        const float div = Divisor(g, inside);
        ForWindow(g, o, [&](int64_t i) {
          for (int64_t ch = 0; ch < c; ++ch) acc[i * c + ch] += ToFloat(dy[row + ch]) / div;
        });
      }
    }
    for (int64_t k = 0; k < inp * c; ++k) dx[n * inp * c + k] = FromFloat<T>(acc[k]);
  });
}

}  // namespace

ffi::Error PoolFwdCpu(const PoolFwdArgs& p, ffi::ThreadPool* pool) {
  if (p.g.batch == 0 || p.g.channels == 0 || p.g.out_positions() == 0) return ffi::Error::Success();
  return ByDtypeCpu(p.dtype, "jaxdnn pooling forward", [&](auto t) { Forward<decltype(t)>(p, pool); });
}

ffi::Error PoolBwdCpu(const PoolBwdArgs& p, ffi::ThreadPool* pool) {
  if (p.g.batch == 0 || p.g.channels == 0 || p.g.in_positions() == 0) return ffi::Error::Success();
  return ByDtypeCpu(p.dtype, "jaxdnn pooling backward", [&](auto t) { Backward<decltype(t)>(p, pool); });
}

}  // namespace jaxdnn::pooling
