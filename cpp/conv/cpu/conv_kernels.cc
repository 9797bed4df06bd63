// Direct convolution on the CPU. Every kernel walks the taps with per-dim
// index tables (which input a (output, tap) pair reads, or which output an
// (input, tap) pair feeds) so padding, strides and both dilations cost
// nothing in the inner loops, which run over contiguous channels:
//   forward  one work item per (sample, output row): y[o, co] += x[i, ci] w[tap, ci, co]
//   dgrad    one per (sample, input row):  dx[i, ci] += dz[o, co] w^T[tap, co, ci]
//   wgrad    one per (tap, group, block of input channels), summing over
//            samples and positions in a fixed order
// Items own their outputs, so results never depend on the threads.
#include "conv/cpu/conv_kernels.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/activation.h"
#include "common/cpu_dispatch.h"
#include "common/cpu_parallel.h"
#include "common/host_half.h"

namespace jaxdnn::conv {
namespace {

float LoadAt(const void* p, ffi::DataType t, int64_t i) {
  switch (t) {
    case ffi::DataType::BF16: return ToFloat(static_cast<const bf16_t*>(p)[i]);
    case ffi::DataType::F16: return ToFloat(static_cast<const f16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

void StoreAt(void* p, ffi::DataType t, int64_t i, float v) {
  switch (t) {
    case ffi::DataType::BF16: static_cast<bf16_t*>(p)[i] = FromFloat<bf16_t>(v); break;
    case ffi::DataType::F16: static_cast<f16_t*>(p)[i] = FromFloat<f16_t>(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

// Per spatial dim k: the input an (output o, tap j) pair reads, or -1.
struct ForwardMaps {
  std::vector<int64_t> dim[3];
  explicit ForwardMaps(const ConvGeometry& g) {
    for (int k = 0; k < 3; ++k) {
      dim[k].assign(size_t(g.out[k] * g.window[k]), -1);
      for (int64_t o = 0; o < g.out[k]; ++o) {
        for (int64_t j = 0; j < g.window[k]; ++j) {
          const int64_t pos = o * g.stride[k] - g.pad_lo[k] + j * g.k_dilation[k];
          if (pos < 0 || pos % g.in_dilation[k]) continue;
          const int64_t i = pos / g.in_dilation[k];
          if (i < g.in[k]) dim[k][size_t(o * g.window[k] + j)] = i;
        }
      }
    }
  }
};

// Per spatial dim k: the output an (input i, tap j) pair feeds, or -1.
struct BackwardMaps {
  std::vector<int64_t> dim[3];
  explicit BackwardMaps(const ConvGeometry& g) {
    for (int k = 0; k < 3; ++k) {
      dim[k].assign(size_t(g.in[k] * g.window[k]), -1);
      for (int64_t i = 0; i < g.in[k]; ++i) {
        for (int64_t j = 0; j < g.window[k]; ++j) {
          const int64_t q = i * g.in_dilation[k] + g.pad_lo[k] - j * g.k_dilation[k];
          if (q < 0 || q % g.stride[k]) continue;
          const int64_t o = q / g.stride[k];
          if (o < g.out[k]) dim[k][size_t(i * g.window[k] + j)] = o;
        }
      }
    }
  }
};

// acc[c] += a * b[c], c < n (vectorizes: no reduction).
inline void Axpy(float* acc, float a, const float* b, int64_t n) {
  for (int64_t c = 0; c < n; ++c) acc[c] += a * b[c];
}

template <typename T>
void Forward(const ConvFwdArgs& p, ffi::ThreadPool* pool) {
  const ConvGeometry& g = p.g;
  const int64_t cin = g.in_channels, cout = g.out_channels, cin_g = g.cin_g(), cout_g = g.cout_g();
  const bool depthwise = cin_g == 1 && cout_g == 1;
  std::vector<float> w(size_t(g.weights()));
  for (int64_t i = 0; i < g.weights(); ++i) w[size_t(i)] = ToFloat(static_cast<const T*>(p.w)[i]);
  const ForwardMaps maps(g);
  const T* x = static_cast<const T*>(p.x);
  const int64_t rows = g.batch * g.out[0] * g.out[1];
  ParallelFor(pool, rows, [&](int64_t item) {
    const int64_t n = item / (g.out[0] * g.out[1]), o0 = (item / g.out[1]) % g.out[0], o1 = item % g.out[1];
    std::vector<float> acc(size_t(g.out[2] * cout), 0.0f);
    for (int64_t j0 = 0; j0 < g.window[0]; ++j0) {
      const int64_t i0 = maps.dim[0][size_t(o0 * g.window[0] + j0)];
      if (i0 < 0) continue;
      for (int64_t j1 = 0; j1 < g.window[1]; ++j1) {
        const int64_t i1 = maps.dim[1][size_t(o1 * g.window[1] + j1)];
        if (i1 < 0) continue;
        const T* xrow = x + ((n * g.in[0] + i0) * g.in[1] + i1) * g.in[2] * cin;
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
          float* a = acc.data() + o2 * cout;
          for (int64_t j2 = 0; j2 < g.window[2]; ++j2) {
            const int64_t i2 = maps.dim[2][size_t(o2 * g.window[2] + j2)];
            if (i2 < 0) continue;
            const int64_t tap = (j0 * g.window[1] + j1) * g.window[2] + j2;
            const T* xs = xrow + i2 * cin;
            const float* wt = w.data() + tap * cin_g * cout;
            if (depthwise) {
              for (int64_t c = 0; c < cin; ++c) a[c] += ToFloat(xs[c]) * wt[c];
              continue;
            }
            for (int64_t gr = 0; gr < g.groups; ++gr) {
              for (int64_t ci = 0; ci < cin_g; ++ci) {
                Axpy(a + gr * cout_g, ToFloat(xs[gr * cin_g + ci]), wt + ci * cout + gr * cout_g, cout_g);
              }
            }
          }
        }
      }
    }
    // The epilogue, on this item's outputs.
    const int64_t base = item * g.out[2] * cout;
    ByAct(p.e.act, [&](auto act) {
      constexpr Act A = decltype(act)::value;
      for (int64_t k = 0; k < g.out[2] * cout; ++k) {
        float z = p.e.alpha * acc[size_t(k)];
        if (p.bias) z += LoadAt(p.bias, p.bias_dtype, k % cout);
        if (p.residual) z += p.e.beta * LoadAt(p.residual, p.residual_dtype, base + k);
        StoreAt(p.y, p.out_dtype, base + k, Apply<A>(z, p.e.act_param));
        if (p.z) StoreAt(p.z, p.out_dtype, base + k, z);
      }
    });
  });
}

// dz = act'(saved) * dy for every output, float32 ([N * out positions * C_out]).
std::vector<float> PreactGrad(const ConvGeometry& g, const Epilogue& e, const void* dy, const void* saved,
                              ffi::DataType dy_dtype, ffi::ThreadPool* pool) {
  const int64_t per = g.out_positions() * g.out_channels;
  std::vector<float> dz(size_t(g.batch * per));
  ParallelFor(pool, g.batch, [&](int64_t n) {
    ByAct(e.act, [&](auto act) {
      constexpr Act A = decltype(act)::value;
      for (int64_t k = n * per; k < (n + 1) * per; ++k) {
        const float d = LoadAt(dy, dy_dtype, k);
        dz[size_t(k)] = saved ? Backprop<A>(LoadAt(saved, dy_dtype, k), d, e.act_param) : d;
      }
    });
  });
  return dz;
}

template <typename T>
void Dgrad(const ConvDgradArgs& p, ffi::ThreadPool* pool) {
  const ConvGeometry& g = p.g;
  const int64_t cin = g.in_channels, cout = g.out_channels, cin_g = g.cin_g(), cout_g = g.cout_g();
  const bool depthwise = cin_g == 1 && cout_g == 1;
  std::vector<float> dz = PreactGrad(g, p.e, p.dy, p.saved, p.dy_dtype, pool);
  if (p.dresidual) {
    for (size_t k = 0; k < dz.size(); ++k) StoreAt(p.dresidual, p.residual_dtype, int64_t(k), p.e.beta * dz[k]);
  }
  // alpha * w transposed per group: wt[tap][group][co][ci].
  const T* w = static_cast<const T*>(p.w);
  std::vector<float> wt(size_t(g.weights()));
  for (int64_t tap = 0; tap < g.taps(); ++tap) {
    for (int64_t ci = 0; ci < cin_g; ++ci) {
      for (int64_t co = 0; co < cout; ++co) {
        const int64_t gr = co / cout_g;
        wt[size_t(((tap * g.groups + gr) * cout_g + co % cout_g) * cin_g + ci)] =
            p.e.alpha * ToFloat(w[(tap * cin_g + ci) * cout + co]);
      }
    }
  }
  const BackwardMaps maps(g);
  T* dx = static_cast<T*>(p.dx);
  const int64_t rows = g.batch * g.in[0] * g.in[1];
  ParallelFor(pool, rows, [&](int64_t item) {
    const int64_t n = item / (g.in[0] * g.in[1]), i0 = (item / g.in[1]) % g.in[0], i1 = item % g.in[1];
    std::vector<float> acc(size_t(g.in[2] * cin), 0.0f);
    for (int64_t j0 = 0; j0 < g.window[0]; ++j0) {
      const int64_t o0 = maps.dim[0][size_t(i0 * g.window[0] + j0)];
      if (o0 < 0) continue;
      for (int64_t j1 = 0; j1 < g.window[1]; ++j1) {
        const int64_t o1 = maps.dim[1][size_t(i1 * g.window[1] + j1)];
        if (o1 < 0) continue;
        const float* dzrow = dz.data() + ((n * g.out[0] + o0) * g.out[1] + o1) * g.out[2] * cout;
        for (int64_t i2 = 0; i2 < g.in[2]; ++i2) {
          float* a = acc.data() + i2 * cin;
          for (int64_t j2 = 0; j2 < g.window[2]; ++j2) {
            const int64_t o2 = maps.dim[2][size_t(i2 * g.window[2] + j2)];
            if (o2 < 0) continue;
            const int64_t tap = (j0 * g.window[1] + j1) * g.window[2] + j2;
            const float* d = dzrow + o2 * cout;
            const float* wtap = wt.data() + tap * cin_g * cout;
            if (depthwise) {
              for (int64_t c = 0; c < cin; ++c) a[c] += d[c] * wtap[c];
              continue;
            }
            for (int64_t gr = 0; gr < g.groups; ++gr) {
              for (int64_t co = 0; co < cout_g; ++co) {
                Axpy(a + gr * cin_g, d[gr * cout_g + co], wtap + (gr * cout_g + co) * cin_g, cin_g);
              }
            }
          }
        }
      }
    }
    T* out = dx + item * g.in[2] * cin;
    for (int64_t k = 0; k < g.in[2] * cin; ++k) out[k] = FromFloat<T>(acc[size_t(k)]);
  });
}

template <typename T>
void Wgrad(const ConvWgradArgs& p, ffi::ThreadPool* pool) {
  const ConvGeometry& g = p.g;
  const int64_t cin = g.in_channels, cout = g.out_channels, cin_g = g.cin_g(), cout_g = g.cout_g();
  const bool depthwise = cin_g == 1 && cout_g == 1;
  std::vector<float> dz = PreactGrad(g, p.e, p.dy, p.saved, p.dy_dtype, pool);
  const ForwardMaps maps(g);
  const T* x = static_cast<const T*>(p.x);
  T* dw = static_cast<T*>(p.dw);
  // Depthwise: an item per (tap, block of channels); else per (tap, group,
  // block of a group's input channels), accumulating [block, C_out/groups].
  const int64_t block = depthwise ? 64 : 8;
  const int64_t blocks = depthwise ? (cin + block - 1) / block : (cin_g + block - 1) / block;
  const int64_t per_tap = depthwise ? blocks : g.groups * blocks;
  ParallelFor(pool, g.taps() * per_tap, [&](int64_t item) {
    const int64_t tap = item / per_tap, rest = item % per_tap;
    const int64_t gr = depthwise ? 0 : rest / blocks, b = depthwise ? rest : rest % blocks;
    const int64_t c0 = b * block, c1 = std::min(depthwise ? cin : cin_g, c0 + block);
    const int64_t j0 = tap / (g.window[1] * g.window[2]), j1 = (tap / g.window[2]) % g.window[1],
                  j2 = tap % g.window[2];
    const int64_t width = depthwise ? 1 : cout_g;
    std::vector<float> acc(size_t((c1 - c0) * width), 0.0f);
    for (int64_t n = 0; n < g.batch; ++n) {
      for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
        const int64_t i0 = maps.dim[0][size_t(o0 * g.window[0] + j0)];
        if (i0 < 0) continue;
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
          const int64_t i1 = maps.dim[1][size_t(o1 * g.window[1] + j1)];
          if (i1 < 0) continue;
          for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
            const int64_t i2 = maps.dim[2][size_t(o2 * g.window[2] + j2)];
            if (i2 < 0) continue;
            const T* xs = x + (((n * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2) * cin;
            const float* d = dz.data() + (((n * g.out[0] + o0) * g.out[1] + o1) * g.out[2] + o2) * cout;
            if (depthwise) {
              for (int64_t c = c0; c < c1; ++c) acc[size_t(c - c0)] += ToFloat(xs[c]) * d[c];
              continue;
            }
            for (int64_t ci = c0; ci < c1; ++ci) {
              Axpy(acc.data() + (ci - c0) * cout_g, ToFloat(xs[gr * cin_g + ci]), d + gr * cout_g, cout_g);
            }
          }
        }
      }
    }
    for (int64_t ci = c0; ci < c1; ++ci) {
      for (int64_t co = 0; co < width; ++co) {
        const int64_t at = depthwise ? tap * cout + ci : (tap * cin_g + ci) * cout + gr * cout_g + co;
        dw[at] = FromFloat<T>(p.e.alpha * acc[size_t((ci - c0) * width + co)]);
      }
    }
  });
  if (p.dbias) {
    const int64_t positions = g.batch * g.out_positions(), cblock = 64;
    ParallelFor(pool, (cout + cblock - 1) / cblock, [&](int64_t b) {
      const int64_t c0 = b * cblock, c1 = std::min(cout, c0 + cblock);
      std::vector<float> sum(size_t(c1 - c0), 0.0f);
      for (int64_t q = 0; q < positions; ++q) {
        for (int64_t c = c0; c < c1; ++c) sum[size_t(c - c0)] += dz[size_t(q * cout + c)];
      }
      for (int64_t c = c0; c < c1; ++c) StoreAt(p.dbias, p.bias_dtype, c, sum[size_t(c - c0)]);
    });
  }
}

}  // namespace

ffi::Error ConvFwdCpu(const ConvFwdArgs& p, ffi::ThreadPool* pool) {
  return ByDtypeCpu(p.dtype, "jaxdnn conv forward", [&](auto t) { Forward<decltype(t)>(p, pool); });
}

ffi::Error ConvDgradCpu(const ConvDgradArgs& p, ffi::ThreadPool* pool) {
  return ByDtypeCpu(p.dtype, "jaxdnn conv data gradient", [&](auto t) { Dgrad<decltype(t)>(p, pool); });
}

ffi::Error ConvWgradCpu(const ConvWgradArgs& p, ffi::ThreadPool* pool) {
  return ByDtypeCpu(p.dtype, "jaxdnn conv weight gradient", [&](auto t) { Wgrad<decltype(t)>(p, pool); });
}

}  // namespace jaxdnn::conv
