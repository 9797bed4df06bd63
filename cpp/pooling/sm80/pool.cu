// Pooling on CUDA (formulas in pooling/problem.h). A thread owns a 16-byte
// vector of channels (or one channel) of one output position (forward) or
// one input position (backward), so every load is a coalesced channel row.
// The backward gathers instead of scattering: an input position sums dy
// over the output positions whose windows hold it (and, for max, whose index
// names it), in output order: no atomics, deterministic.
#include "common/sm80/row_walk.cuh"
#include "pooling/sm80/pool_launch.h"

namespace jaxdnn::pooling {
namespace {

struct Dims3 {
  int64_t v[3];
};

__device__ inline Dims3 Unflatten(int64_t flat, const int64_t (&dims)[3]) {
  return {{flat / (dims[1] * dims[2]), (flat / dims[2]) % dims[1], flat % dims[2]}};
}

struct Geo {
  int64_t in[3], out[3], window[3], stride[3], dilation[3], pad_lo[3];
  int64_t channels, in_positions, out_positions;
  bool max, count_include_pad, adaptive;
};

Geo GeoOf(const PoolGeometry& g) {
  Geo d;
  for (int k = 0; k < 3; ++k) {
    d.in[k] = g.in[k];
    d.out[k] = g.out[k];
    d.window[k] = g.window[k];
    d.stride[k] = g.stride[k];
    d.dilation[k] = g.dilation[k];
    d.pad_lo[k] = g.pad_lo[k];
  }
  d.channels = g.channels;
  d.in_positions = g.in_positions();
  d.out_positions = g.out_positions();
  d.max = g.max;
  d.count_include_pad = g.count_include_pad;
  d.adaptive = g.adaptive;
  return d;
}

__device__ inline float Divisor(const Geo& g, int64_t inside) {
  return g.count_include_pad && !g.adaptive ? float(g.window[0] * g.window[1] * g.window[2]) : float(inside);
}

// Output position o's window along dim k: its first input, step and length.
__device__ inline void WindowOf(const Geo& g, int k, int64_t o, int64_t* first, int64_t* step,
                                int64_t* count) {
  if (g.adaptive) {
    int64_t last;
    AdaptiveSpan(o, g.in[k], g.out[k], first, &last);
    *step = 1;
    *count = last - *first;
  } else {
    *first = o * g.stride[k] - g.pad_lo[k];
    *step = g.dilation[k];
    *count = g.window[k];
  }
}

// How many of output position o's window positions are inside the input.
__device__ inline int64_t Inside(const Geo& g, const Dims3& o) {
  int64_t n = 1;
  for (int k = 0; k < 3; ++k) {
    int64_t first, step, count, c = 0;
    WindowOf(g, k, o.v[k], &first, &step, &count);
    for (int64_t j = 0; j < count; ++j) {
      const int64_t i = first + j * step;
      c += i >= 0 && i < g.in[k];
    }
    n *= c;
  }
  return n;
}

// Output position o's window along dim k clamped to the input: the first
// input and step, and the window steps [lo, hi) that land inside.
struct Span {
  int first, step, lo, hi;
};
__device__ inline Span ClampedWindow(const Geo& g, int k, int o) {
  int64_t first, step, count;
  WindowOf(g, k, o, &first, &step, &count);
  const int64_t in = g.in[k];
  const int64_t lo = first >= 0 ? 0 : (-first + step - 1) / step;
  const int64_t hi = in - first <= 0 ? 0 : min(count, (in - first + step - 1) / step);
  return {int(first), int(step), int(lo), int(max(lo, hi))};
}

// Window loads a thread keeps in flight.
constexpr int kWindowBatch = 8;

// grid: x over channel units, y over (sample, output position) pairs. Per
// pair, the window's rows of (dim 1, dim 2) positions are walked flat in
// batches of kWindowBatch loads issued before any is used, in window order
// (the first arg-max wins); 32-bit position arithmetic (the launcher checks
// a sample's positions fit).
template <typename T, bool kVec>
__global__ void __launch_bounds__(256)
    FwdKernel(const T* __restrict__ x, T* __restrict__ y, int32_t* index, Geo g, int64_t pairs) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (col >= g.channels) return;
  const int out1 = int(g.out[1]), out2 = int(g.out[2]), in1 = int(g.in[1]), in2 = int(g.in[2]);
  for (int64_t pair = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; pair < pairs;
       pair += int64_t(gridDim.y) * blockDim.y) {
    const int64_t n = pair / g.out_positions;
    const int o = int(pair - n * g.out_positions);
    const int o2 = o % out2, o1 = (o / out2) % out1, o0 = o / (out2 * out1);
    const Span s0 = ClampedWindow(g, 0, o0), s1 = ClampedWindow(g, 1, o1), s2 = ClampedWindow(g, 2, o2);
    const int w2 = s2.hi - s2.lo, plane = (s1.hi - s1.lo) * w2;
    const T* xs = x + n * g.in_positions * g.channels + col;
    float acc[N];
    int32_t arg[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      acc[e] = g.max ? -INFINITY : 0.f;
      arg[e] = -1;
    }
    for (int j0 = s0.lo; j0 < s0.hi; ++j0) {
      const int i0 = s0.first + j0 * s0.step;
      for (int f0 = 0; f0 < plane; f0 += kWindowBatch) {
        typename P::Raw raw[kWindowBatch];
        int pos[kWindowBatch];
#pragma unroll
        for (int b = 0; b < kWindowBatch; ++b) {
          const int f = f0 + b;
          const int i1 = s1.first + (s1.lo + f / max(w2, 1)) * s1.step;
          const int i2 = s2.first + (s2.lo + f % max(w2, 1)) * s2.step;
          pos[b] = (i0 * in1 + i1) * in2 + i2;
          if (f < plane) raw[b] = P::Load(xs + int64_t(pos[b]) * g.channels);
        }
#pragma unroll
        for (int b = 0; b < kWindowBatch; ++b) {
          if (f0 + b >= plane) break;
          float v[N];
          P::Unpack(raw[b], v);
#pragma unroll
          for (int e = 0; e < N; ++e) {
            if (!g.max) {
              acc[e] += v[e];
            } else if (!isnan(acc[e]) && (v[e] > acc[e] || isnan(v[e]) || arg[e] < 0)) {
              acc[e] = v[e];
              arg[e] = pos[b];
            }
          }
        }
      }
    }
    const float div = g.max ? 1.f : Divisor(g, int64_t(s0.hi - s0.lo) * plane);
#pragma unroll
    for (int e = 0; e < N; ++e) acc[e] /= div;
    const int64_t at = pair * g.channels + col;
    P::Store(y + at, acc);
    if (index != nullptr) {
#pragma unroll
      for (int e = 0; e < N; ++e) index[at + e] = arg[e];
    }
  }
}

// N indices from a vector's 4N-byte row (16-byte loads where N is whole
// vectors of four: the vector path's rows and columns are 16-byte aligned).
template <int N>
__device__ inline void LoadIndex(const int32_t* p, int32_t (&out)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int q = 0; q < N / 4; ++q) {
      const int4 v = __ldg(reinterpret_cast<const int4*>(p) + q);
      out[4 * q] = v.x;
      out[4 * q + 1] = v.y;
      out[4 * q + 2] = v.z;
      out[4 * q + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) out[e] = p[e];
  }
}

// grid: x over channel units, y over (sample, input position) pairs.
template <typename T, bool kVec>
__global__ void __launch_bounds__(256) BwdKernel(const T* __restrict__ dy, const int32_t* __restrict__ index,
                                                 T* __restrict__ dx, Geo g, int64_t pairs) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (col >= g.channels) return;
  for (int64_t pair = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; pair < pairs;
       pair += int64_t(gridDim.y) * blockDim.y) {
    const int64_t n = pair / g.in_positions, i = pair % g.in_positions;
    const Dims3 id = Unflatten(i, g.in);
    // Per dim, the outputs whose windows hold i: o * stride - pad + j * dilation = i
    // for a j < window; adaptive: floor(i out / in) <= o < ceil((i + 1) out / in).
    int64_t lo[3], hi[3];
    for (int k = 0; k < 3; ++k) {
      if (g.adaptive) {
        lo[k] = (id.v[k] * g.out[k]) / g.in[k];
        hi[k] = min(g.out[k] - 1, ((id.v[k] + 1) * g.out[k] + g.in[k] - 1) / g.in[k] - 1);
      } else {
        const int64_t span = (g.window[k] - 1) * g.dilation[k];
        const int64_t num = id.v[k] + g.pad_lo[k] - span;
        lo[k] = num <= 0 ? 0 : (num + g.stride[k] - 1) / g.stride[k];
        hi[k] = min(g.out[k] - 1, (id.v[k] + g.pad_lo[k]) / g.stride[k]);
      }
    }
    // Whether output o's window along dim k holds input i.
    auto holds = [&](int k, int64_t o, int64_t i) {
      int64_t first, step, count;
      WindowOf(g, k, o, &first, &step, &count);
      const int64_t r = i - first;
      return r >= 0 && r % step == 0 && r / step < count;
    };
    float acc[N] = {};
    for (int64_t o0 = lo[0]; o0 <= hi[0]; ++o0) {
      if (!holds(0, o0, id.v[0])) continue;
      for (int64_t o1 = lo[1]; o1 <= hi[1]; ++o1) {
        if (!holds(1, o1, id.v[1])) continue;
        for (int64_t o2 = lo[2]; o2 <= hi[2]; ++o2) {
          if (!holds(2, o2, id.v[2])) continue;
          const int64_t o = (o0 * g.out[1] + o1) * g.out[2] + o2;
          const int64_t at = (n * g.out_positions + o) * g.channels + col;
          float d[N];
          P::Unpack(P::Load(dy + at), d);
          if (g.max) {
            int32_t idx[N];
            LoadIndex<N>(index + at, idx);
#pragma unroll
            for (int e = 0; e < N; ++e) acc[e] += idx[e] == int32_t(i) ? d[e] : 0.f;
          } else {
            const float div = Divisor(g, Inside(g, Dims3{{o0, o1, o2}}));
#pragma unroll
            for (int e = 0; e < N; ++e) acc[e] += d[e] / div;
          }
        }
      }
    }
    P::Store(dx + (n * g.in_positions + i) * g.channels + col, acc);
  }
}

template <typename Launch>
LaunchStatus ByDtypeVec(ffi::DataType dtype, bool vec, Launch launch) {
  switch (dtype) {
    case ffi::DataType::F32:
      return vec ? launch(float{}, std::true_type{}) : launch(float{}, std::false_type{});
    case ffi::DataType::BF16:
      return vec ? launch(__nv_bfloat16{}, std::true_type{}) : launch(__nv_bfloat16{}, std::false_type{});
    case ffi::DataType::F16:
      return vec ? launch(__half{}, std::true_type{}) : launch(__half{}, std::false_type{});
    default: return LaunchStatus::Refused("no pooling kernel for this dtype");
  }
}

}  // namespace

LaunchStatus PoolFwdCuda(const PoolFwdArgs& p, cudaStream_t stream) {
  const int64_t pairs = p.g.batch * p.g.out_positions();
  if (pairs == 0 || p.g.channels == 0) return cudaSuccess;
  if (p.g.in_positions() > INT32_MAX || p.g.out_positions() > INT32_MAX) {
    return LaunchStatus::Refused("a sample has more than 2^31 - 1 positions");
  }
  const GridPlan plan = MakeGridPlan(pairs, p.g.channels, p.g.channels, ffi::ByteWidth(p.dtype));
  const Geo g = GeoOf(p.g);
  return ByDtypeVec(p.dtype, plan.vec, [&](auto t, auto v) -> LaunchStatus {
    using T = decltype(t);
    FwdKernel<T, decltype(v)::value><<<Grid(plan), Block(plan), 0, stream>>>(
        static_cast<const T*>(p.x), static_cast<T*>(p.y), p.index, g, pairs);
    return Checked();
  });
}

LaunchStatus PoolBwdCuda(const PoolBwdArgs& p, cudaStream_t stream) {
  const int64_t pairs = p.g.batch * p.g.in_positions();
  if (pairs == 0 || p.g.channels == 0) return cudaSuccess;
  const GridPlan plan = MakeGridPlan(pairs, p.g.channels, p.g.channels, ffi::ByteWidth(p.dtype));
  const Geo g = GeoOf(p.g);
  return ByDtypeVec(p.dtype, plan.vec, [&](auto t, auto v) -> LaunchStatus {
    using T = decltype(t);
    BwdKernel<T, decltype(v)::value><<<Grid(plan), Block(plan), 0, stream>>>(
        static_cast<const T*>(p.dy), p.index, static_cast<T*>(p.dx), g, pairs);
    return Checked();
  });
}

}  // namespace jaxdnn::pooling
