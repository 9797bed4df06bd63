// Direct convolution on the CPU, as small GEMMs with register-blocked
// micro-kernels (6 rows x 16 columns of float32 accumulators). Index tables
// say which input an (output, tap) pair reads, so padding, strides and both
// dilations cost nothing in the inner loops.
//   forward  one work item per (sample, output row): for each group and each
//            (tap row) of the window, the row's patches [out W, taps * C_in/g]
//            times the packed weights [taps * C_in/g, C_out/g]
//   dgrad    the same kernel on the transposed problem: dz (float32) dilated
//            by the strides, convolved with the flipped, transposed weights
//   wgrad    one item per (tap, group, block of input channels): the
//            positions' x^T dz in chunks, in a fixed order
// Items own their outputs, so results never depend on the threads.
// Depthwise convolutions (one channel per group) run a channel-vector loop
// instead of 1x1 GEMMs; grouped ones with algorithm="direct" a direct sum
// (per output, group, tap and input channel, a row of C_out/g products), the
// CPU's counterpart of the CUDA grouped kernels, so CI checks that
// algorithm's numerics and gradient paths.
#include "conv/cpu/conv_kernels.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/activation.h"
#include "common/cpu_clones.h"
#include "common/cpu_dispatch.h"
#include "common/cpu_parallel.h"
#include "common/host_half.h"
#include "conv/cpu/forward_epilogue.h"
#include "conv/cpu/gemm_tiles.h"
#include "conv/cpu/winograd.h"

namespace jaxdnn::conv {
namespace {

// Per spatial dim k: the input an (output o, tap j) pair reads, or -1.
struct InputMaps {
  std::vector<int64_t> dim[3];
  explicit InputMaps(const ConvGeometry& g) {
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
  int64_t at(int k, int64_t o, int64_t j, const ConvGeometry& g) const {
    return dim[k][size_t(o * g.window[k] + j)];
  }
};

// Weights as the forward core reads them: per group, [taps * C_in/g] rows of
// ld >= C_out/g floats (zero padded), or for depthwise [taps][C] unpadded.
struct Packed {
  std::vector<float> w;
  int64_t ld = 0;
  float* group(int64_t gr, const ConvGeometry& g) { return w.data() + gr * g.taps() * g.cin_g() * ld; }
  const float* group(int64_t gr, const ConvGeometry& g) const {
    return w.data() + gr * g.taps() * g.cin_g() * ld;
  }
};

// Depthwise problems (one channel per group) take the channel-vector loop
// unless the call asked for the implicit GEMM.
bool Depthwise(const ConvGeometry& g) {
  return g.cin_g() == 1 && g.cout_g() == 1 && g.algorithm != kAlgoImplicitGemm;
}

Packed Allocate(const ConvGeometry& g) {
  Packed pw;
  pw.ld = Depthwise(g) ? 1 : RoundUp(g.cout_g(), kTileCols);
  pw.w.assign(size_t(g.groups * g.taps() * g.cin_g() * pw.ld), 0.0f);
  return pw;
}

// w[tap][ci][co] (the call's layout) -> per group [tap * C_in/g + ci][co].
template <typename T>
Packed PackForward(const ConvGeometry& g, const T* w) {
  Packed pw = Allocate(g);
  const int64_t cin_g = g.cin_g(), cout_g = g.cout_g(), cout = g.out_channels;
  for (int64_t tap = 0; tap < g.taps(); ++tap) {
    for (int64_t ci = 0; ci < cin_g; ++ci) {
      for (int64_t co = 0; co < cout; ++co) {
        const float v = ToFloat(w[(tap * cin_g + ci) * cout + co]);
        if (Depthwise(g)) {
          pw.w[size_t(tap * cout + co)] = v;
        } else {
          pw.group(co / cout_g, g)[(tap * cin_g + ci) * pw.ld + co % cout_g] = v;
        }
      }
    }
  }
  return pw;
}

// One output row (sample n, rows o0, o1) of a convolution: acc [out W][C_out]
// (zeroed here) from input x [N, in positions, C_in]: per group, one GEMM of
// the row's patches [out W][valid tap rows * w2 * C_in/g] (zero where
// padding) by the weight rows of those taps. abuf, runs: scratch.
template <typename T>
void ConvRow(const ConvGeometry& g, const InputMaps& maps, const T* x, const Packed& pw, int64_t n,
             int64_t o0, int64_t o1, float* acc, std::vector<float>& abuf, std::vector<Run>& runs) {
  const int64_t cin = g.in_channels, cout = g.out_channels, cin_g = g.cin_g(), cout_g = g.cout_g();
  const int64_t w2 = g.window[2], ow = g.out[2], seg = w2 * cin_g;
  std::fill(acc, acc + ow * cout, 0.0f);
  // The valid tap rows (j0, j1) of this output row, and their input rows.
  std::vector<std::pair<int64_t, const T*>> taps;
  for (int64_t j0 = 0; j0 < g.window[0]; ++j0) {
    const int64_t i0 = maps.at(0, o0, j0, g);
    if (i0 < 0) continue;
    for (int64_t j1 = 0; j1 < g.window[1]; ++j1) {
      const int64_t i1 = maps.at(1, o1, j1, g);
      if (i1 < 0) continue;
      taps.emplace_back((j0 * g.window[1] + j1) * w2,
                        x + ((n * g.in[0] + i0) * g.in[1] + i1) * g.in[2] * cin);
    }
  }
  if (Depthwise(g)) {
    for (const auto& [tap0, xrow] : taps) {
      for (int64_t o2 = 0; o2 < ow; ++o2) {
        float* a = acc + o2 * cout;
        for (int64_t j2 = 0; j2 < w2; ++j2) {
          const int64_t i2 = maps.at(2, o2, j2, g);
          if (i2 < 0) continue;
          const T* xs = xrow + i2 * cin;
          const float* wt = pw.w.data() + (tap0 + j2) * cin;
          for (int64_t c = 0; c < cin; ++c) a[c] += ToFloat(xs[c]) * wt[c];
        }
      }
    }
    return;
  }
  if (g.algorithm == kAlgoDirect) {
    for (const auto& [tap0, xrow] : taps) {
      for (int64_t o2 = 0; o2 < ow; ++o2) {
        for (int64_t j2 = 0; j2 < w2; ++j2) {
          const int64_t i2 = maps.at(2, o2, j2, g);
          if (i2 < 0) continue;
          for (int64_t gr = 0; gr < g.groups; ++gr) {
            const T* xs = xrow + i2 * cin + gr * cin_g;
            const float* wg = pw.group(gr, g) + (tap0 + j2) * cin_g * pw.ld;
            float* a = acc + o2 * cout + gr * cout_g;
            for (int64_t ci = 0; ci < cin_g; ++ci) {
              const float xv = ToFloat(xs[ci]);
              const float* wr = wg + ci * pw.ld;
              for (int64_t co = 0; co < cout_g; ++co) a[co] += xv * wr[co];
            }
          }
        }
      }
    }
    return;
  }
  const int64_t depth = int64_t(taps.size()) * seg;
  abuf.assign(size_t(RoundUp(ow, kTileRows) * depth), 0.0f);
  runs.resize(taps.size());
  for (int64_t gr = 0; gr < g.groups; ++gr) {
    for (size_t t = 0; t < taps.size(); ++t) {
      const auto& [tap0, xrow] = taps[t];
      runs[t] = Run{pw.group(gr, g) + tap0 * cin_g * pw.ld, seg};
      for (int64_t o2 = 0; o2 < ow; ++o2) {
        float* dst0 = abuf.data() + o2 * depth + int64_t(t) * seg;
        for (int64_t j2 = 0; j2 < w2; ++j2) {
          const int64_t i2 = maps.at(2, o2, j2, g);
          float* dst = dst0 + j2 * cin_g;
          if (i2 < 0) {
            std::fill(dst, dst + cin_g, 0.0f);
            continue;
          }
          const T* xs = xrow + i2 * cin + gr * cin_g;
          for (int64_t ci = 0; ci < cin_g; ++ci) dst[ci] = ToFloat(xs[ci]);
        }
      }
    }
    GemmAcc(abuf.data(), depth, runs.data(), int64_t(runs.size()), pw.ld, acc + gr * cout_g, cout, ow,
            cout_g);
  }
}

template <typename T>
void Forward(const ConvFwdArgs& p, ffi::ThreadPool* pool) {
  const ConvGeometry& g = p.g;
  const int64_t cout = g.out_channels;
  const Packed pw = PackForward(g, static_cast<const T*>(p.w));
  const InputMaps maps(g);
  ParallelFor(pool, g.batch * g.out[0] * g.out[1], [&](int64_t item) {
    const int64_t n = item / (g.out[0] * g.out[1]), o0 = (item / g.out[1]) % g.out[0], o1 = item % g.out[1];
    std::vector<float> acc(size_t(g.out[2] * cout)), abuf;
    std::vector<Run> runs;
    ConvRow(g, maps, static_cast<const T*>(p.x), pw, n, o0, o1, acc.data(), abuf, runs);
    StoreForwardOutputs(p, item * g.out[2] * cout, acc.data(), g.out[2] * cout);
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
        const float d = LoadAsFloat(dy, dy_dtype, k);
        dz[size_t(k)] = saved ? Backprop<A>(LoadAsFloat(saved, dy_dtype, k), d, e.act_param) : d;
      }
    });
  });
  return dz;
}

// The data gradient as a forward convolution: input dz [N, out, C_out]
// dilated by the strides, the window flipped, C_in and C_out swapped, the
// forward's input dilation as the stride, low padding (span - 1) - pad_lo.
ConvGeometry TransposedGeometry(const ConvGeometry& g) {
  ConvGeometry t = g;
  t.in_channels = g.out_channels;
  t.out_channels = g.in_channels;
  for (int k = 0; k < 3; ++k) {
    t.in[k] = g.out[k];
    t.out[k] = g.in[k];
    t.stride[k] = g.in_dilation[k];
    t.in_dilation[k] = g.stride[k];
    t.pad_lo[k] = (g.window[k] - 1) * g.k_dilation[k] - g.pad_lo[k];
  }
  return t;
}

// alpha * w flipped and transposed per group, packed for TransposedGeometry.
template <typename T>
Packed PackDgrad(const ConvGeometry& g, const ConvGeometry& t, const T* w, float alpha) {
  Packed pw = Allocate(t);
  const int64_t cin_g = g.cin_g(), cout_g = g.cout_g(), cout = g.out_channels;
  for (int64_t j0 = 0; j0 < g.window[0]; ++j0) {
    for (int64_t j1 = 0; j1 < g.window[1]; ++j1) {
      for (int64_t j2 = 0; j2 < g.window[2]; ++j2) {
        const int64_t tap = (j0 * g.window[1] + j1) * g.window[2] + j2;
        const int64_t flip = ((g.window[0] - 1 - j0) * g.window[1] + (g.window[1] - 1 - j1)) * g.window[2] +
                             (g.window[2] - 1 - j2);
        for (int64_t ci = 0; ci < cin_g; ++ci) {
          for (int64_t co = 0; co < cout; ++co) {
            const float v = alpha * ToFloat(w[(tap * cin_g + ci) * cout + co]);
            const int64_t gr = co / cout_g;
            if (Depthwise(g)) {
              pw.w[size_t(flip * cout + co)] = v;
            } else {
              pw.group(gr, t)[(flip * cout_g + co % cout_g) * pw.ld + ci] = v;
            }
          }
        }
      }
    }
  }
  return pw;
}

template <typename T>
void Dgrad(const ConvDgradArgs& p, ffi::ThreadPool* pool) {
  const ConvGeometry& g = p.g;
  const std::vector<float> dz = PreactGrad(g, p.e, p.dy, p.saved, p.dy_dtype, pool);
  if (p.dresidual) {
    for (size_t k = 0; k < dz.size(); ++k)
      StoreFromFloat(p.dresidual, p.residual_dtype, int64_t(k), p.e.beta * dz[k]);
  }
  const ConvGeometry t = TransposedGeometry(g);
  const Packed pw = PackDgrad(g, t, static_cast<const T*>(p.w), p.e.alpha);
  const InputMaps maps(t);
  T* dx = static_cast<T*>(p.dx);
  const int64_t cin = g.in_channels;
  ParallelFor(pool, t.batch * t.out[0] * t.out[1], [&](int64_t item) {
    const int64_t n = item / (t.out[0] * t.out[1]), i0 = (item / t.out[1]) % t.out[0], i1 = item % t.out[1];
    std::vector<float> acc(size_t(t.out[2] * cin)), abuf;
    std::vector<Run> runs;
    ConvRow(t, maps, dz.data(), pw, n, i0, i1, acc.data(), abuf, runs);
    T* out = dx + item * t.out[2] * cin;
    for (int64_t k = 0; k < t.out[2] * cin; ++k) out[k] = FromFloat<T>(acc[size_t(k)]);
  });
}

// dw[tap][ci][co] = alpha * sum over positions of x[i(o, tap)][ci] dz[o][co]:
// per item, positions in chunks gathered into float [chunk][ci block] and
// [chunk][C_out/g] buffers, then x^T dz by 6 x 16 tiles.
template <typename T>
void Wgrad(const ConvWgradArgs& p, ffi::ThreadPool* pool) {
  const ConvGeometry& g = p.g;
  const int64_t cin = g.in_channels, cout = g.out_channels, cin_g = g.cin_g(), cout_g = g.cout_g();
  const std::vector<float> dz = PreactGrad(g, p.e, p.dy, p.saved, p.dy_dtype, pool);
  const InputMaps maps(g);
  const T* x = static_cast<const T*>(p.x);
  T* dw = static_cast<T*>(p.dw);
  const bool depthwise = Depthwise(g);
  // Depthwise: the "block" runs over channels (each its own group).
  const int64_t span = depthwise ? cin : cin_g;
  const int64_t block = depthwise ? 64 : 32;
  const int64_t blocks = (span + block - 1) / block, per_tap = depthwise ? blocks : g.groups * blocks;
  constexpr int64_t kChunk = 256;
  ParallelFor(pool, g.taps() * per_tap, [&](int64_t item) {
    const int64_t tap = item / per_tap, rest = item % per_tap;
    const int64_t gr = depthwise ? 0 : rest / blocks, c0 = (depthwise ? rest : rest % blocks) * block;
    const int64_t cb = std::min(span, c0 + block) - c0;
    const int64_t j0 = tap / (g.window[1] * g.window[2]), j1 = (tap / g.window[2]) % g.window[1],
                  j2 = tap % g.window[2];
    const int64_t ld = RoundUp(cout_g, kTileCols), width = depthwise ? cb : cout_g;
    std::vector<float> acc(size_t(depthwise ? cb : RoundUp(cb, kTileRows) * ld), 0.0f);
    // xt: [ci block rows][chunk] (the GEMM's A, transposed x); dzc: [chunk][ld].
    std::vector<float> xt(size_t(RoundUp(cb, kTileRows) * kChunk), 0.0f), dzc(size_t(kChunk * ld), 0.0f);
    int64_t filled = 0;
    auto flush = [&] {
      const Run run{dzc.data(), filled};
      if (!depthwise && filled > 0) GemmAcc(xt.data(), kChunk, &run, 1, ld, acc.data(), ld, cb, cout_g);
      filled = 0;
    };
    for (int64_t n = 0; n < g.batch; ++n) {
      for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
        const int64_t i0 = maps.at(0, o0, j0, g);
        if (i0 < 0) continue;
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
          const int64_t i1 = maps.at(1, o1, j1, g);
          if (i1 < 0) continue;
          for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
            const int64_t i2 = maps.at(2, o2, j2, g);
            if (i2 < 0) continue;
            const T* xs = x + (((n * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2) * cin;
            const float* d = dz.data() + (((n * g.out[0] + o0) * g.out[1] + o1) * g.out[2] + o2) * cout;
            if (depthwise) {
              for (int64_t c = 0; c < cb; ++c) acc[size_t(c)] += ToFloat(xs[c0 + c]) * d[c0 + c];
              continue;
            }
            for (int64_t c = 0; c < cb; ++c)
              xt[size_t(c * kChunk + filled)] = ToFloat(xs[gr * cin_g + c0 + c]);
            std::copy(d + gr * cout_g, d + (gr + 1) * cout_g, dzc.begin() + filled * ld);
            if (++filled == kChunk) flush();
          }
        }
      }
    }
    flush();
    for (int64_t c = 0; c < cb; ++c) {
      for (int64_t co = 0; co < (depthwise ? 1 : width); ++co) {
        const int64_t at = depthwise ? tap * cout + c0 + c : (tap * cin_g + c0 + c) * cout + gr * cout_g + co;
        dw[at] = FromFloat<T>(p.e.alpha * acc[size_t(depthwise ? c : c * ld + co)]);
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
      for (int64_t c = c0; c < c1; ++c) StoreFromFloat(p.dbias, p.bias_dtype, c, sum[size_t(c - c0)]);
    });
  }
}

}  // namespace

ffi::Error ConvFwdCpu(const ConvFwdArgs& p, ffi::ThreadPool* pool) {
  if (p.g.algorithm == kAlgoWinograd) return WinogradFwdCpu(p, pool);
  return ByDtypeCpu(p.dtype, "jaxdnn conv forward", [&](auto t) { Forward<decltype(t)>(p, pool); });
}

ffi::Error ConvDgradCpu(const ConvDgradArgs& p, ffi::ThreadPool* pool) {
  return ByDtypeCpu(p.dtype, "jaxdnn conv data gradient", [&](auto t) { Dgrad<decltype(t)>(p, pool); });
}

ffi::Error ConvWgradCpu(const ConvWgradArgs& p, ffi::ThreadPool* pool) {
  return ByDtypeCpu(p.dtype, "jaxdnn conv weight gradient", [&](auto t) { Wgrad<decltype(t)>(p, pool); });
}

}  // namespace jaxdnn::conv
