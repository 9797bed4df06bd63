// Pooling on CUDA (formulas in pooling/problem.h). A thread owns a 16-byte
// vector of channels (or one channel) of one output position (forward) or
// one input position (backward), so every load is a coalesced channel row.
// A thread walks its (sample, position) pairs as digits advanced with
// carries (no division per pair) and its window with incremental counters
// (no division per load), issuing a batch of loads before using any. The
// backward gathers instead of scattering: an input position sums dy over the
// output positions whose windows hold it (and, for max, whose index names
// it), in output order: no atomics, deterministic.
#include "common/sm80/row_walk.cuh"
#include "pooling/sm80/pool_launch.h"

namespace jaxdnn::pooling {
namespace {

// n / d for 0 <= n < 2^31 by a multiply-high and a shift (d >= 1 fixed per
// launch; cutlass's FastDivmod).
struct FastDiv {
  uint32_t d = 1, mul = 0, shift = 0;
  FastDiv() = default;
  explicit FastDiv(int64_t divisor) : d(uint32_t(divisor)) {
    if (d != 1) {
      uint32_t l = 0;  // ceil(log2 d)
      while ((uint64_t(1) << l) < d) ++l;
      const uint32_t p = 31 + l;
      mul = uint32_t(((uint64_t(1) << p) + d - 1) / d);
      shift = p - 32;
    }
  }
  __device__ int Div(int n) const { return d == 1 ? n : int(__umulhi(uint32_t(n), mul) >> shift); }
};

// n / d for 0 <= n < 2^62 and 1 <= d < 2^31 (Granlund and Montgomery: with
// l = ceil(log2 d) and m = ceil(2^(62 + l) / d), n / d = n m / 2^(62 + l));
// a shift for powers of two. No 64-bit division (a call) in the kernels.
struct FastDiv64 {
  uint64_t mul = 0;
  uint32_t shift = 0;
  bool pow2 = true;
  FastDiv64() = default;
  explicit FastDiv64(int64_t divisor) {
    const uint64_t d = uint64_t(divisor);
    while ((uint64_t(1) << shift) < d) ++shift;
    pow2 = (d & (d - 1)) == 0;
    if (!pow2) {
      // d >= 3, so l >= 2; 2^(62 + l) / d is not whole, so its floor + 1 is m.
      mul = uint64_t(((unsigned __int128)(1) << (62 + shift)) / d + 1);
      shift -= 2;
    }
  }
  __device__ int64_t Div(int64_t n) const {
    return pow2 ? int64_t(uint64_t(n) >> shift) : int64_t(__umul64hi(uint64_t(n), mul) >> shift);
  }
};

// The geometry in 32-bit ints: the launcher checks that a sample's positions
// and every window's reach fit.
struct Geo {
  int in[3], out[3], window[3], stride[3], dilation[3], pad_lo[3];
  FastDiv stride_div[3];
  FastDiv64 in_div[3], out_div[3];                // adaptive windows
  FastDiv64 in_div_positions, out_div_positions;  // the pairs' walks
  int holder_period[3];  // backward with dilation d: every d / gcd(stride, d)-th output holds an input
  int in_positions, out_positions;
  int64_t batch;
  int channels;
  float window_size;       // the divisor with count_include_pad
  bool const_divisor;      // avg: every window divides by window_size
  bool adaptive, overlap;  // overlap: windows share inputs (loads through L1)
};

// A thread's walk over (sample, position) pairs, position p = (p0, p1, p2)
// over dims `dims`: pair, pair + step, ... as digits, the step added with
// carries. One division when the walk starts, none per pair.
struct Step {
  int64_t n;
  int p[3];
};

Step StepOf(int64_t pairs, const int (&dims)[3]) {
  const int64_t positions = int64_t(dims[0]) * dims[1] * dims[2];
  const int64_t rest = pairs % positions;
  return {pairs / positions,
          {int(rest / (int64_t(dims[1]) * dims[2])), int((rest / dims[2]) % dims[1]), int(rest % dims[2])}};
}

struct PairWalk {
  int64_t n;
  int p[3];

  __device__ PairWalk(int64_t first, const int (&dims)[3], const FastDiv64& positions)
      : n(positions.Div(first)) {
    int o = int(first - n * int64_t(dims[0]) * dims[1] * dims[2]);
    p[2] = o % dims[2];
    o /= dims[2];
    p[1] = o % dims[1];
    p[0] = o / dims[1];
  }
  __device__ void Advance(const Step& s, const int (&dims)[3]) {
    p[2] += s.p[2];
    int carry = p[2] >= dims[2];
    if (carry) p[2] -= dims[2];
    p[1] += s.p[1] + carry;
    carry = p[1] >= dims[1];
    if (carry) p[1] -= dims[1];
    p[0] += s.p[0] + carry;
    carry = p[0] >= dims[0];
    if (carry) p[0] -= dims[0];
    n += s.n + carry;
  }
};

// Output o's window along dim k clamped to the input: the first input
// inside, the step between inputs, and how many are inside.
struct Span {
  int first, step, count;
};
__device__ inline Span ClampedWindow(const Geo& g, int k, int o) {
  if (g.adaptive) {
    const int first = int(g.out_div[k].Div(int64_t(o) * g.in[k]));
    const int last = int(g.out_div[k].Div(int64_t(o + 1) * g.in[k] + g.out[k] - 1));
    return {first, 1, last - first};
  }
  const int first = o * g.stride[k] - g.pad_lo[k], d = g.dilation[k];
  if (d == 1) {
    const int lo = max(first, 0), hi = min(first + g.window[k], g.in[k]);
    return {lo, 1, max(hi - lo, 0)};
  }
  const int lo = first >= 0 ? 0 : (d - 1 - first) / d;  // window steps before the input
  const int hi = min(g.window[k], (g.in[k] - first + d - 1) / d);
  return {first + lo * d, d, max(hi - lo, 0)};
}

// p + pos rows of `row_bytes` (pos >= 0; one IMAD.WIDE.U32: both 32-bit).
template <typename T>
__device__ inline T* AtRow(T* p, int pos, int row_bytes) {
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) + uint64_t(uint32_t(pos)) * uint32_t(row_bytes));
}

// Loads of one 16-byte vector (or element) of a row: through L1 where
// windows overlap (neighbouring windows re-read it), streaming otherwise.
template <typename T, bool kVec>
__device__ inline typename Pack<T, kVec>::Raw LoadX(const T* p, bool overlap) {
  if constexpr (kVec) {
    return LoadRow(p, !overlap);
  } else {
    return __ldg(p);
  }
}

enum class Op { kAvg, kMax, kMaxIndex };

template <typename T>
struct Half2Of;
template <>
struct Half2Of<__nv_bfloat16> {
  using Type = __nv_bfloat162;
  static constexpr uint32_t kNegInf = 0xff80ff80u;
};
template <>
struct Half2Of<__half> {
  using Type = __half2;
  static constexpr uint32_t kNegInf = 0xfc00fc00u;
};

template <typename T>
__device__ inline typename Half2Of<T>::Type AsPair(uint32_t w) {
  return *reinterpret_cast<const typename Half2Of<T>::Type*>(&w);
}
template <typename T>
__device__ inline uint32_t AsWord(typename Half2Of<T>::Type h) {
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ inline uint32_t& Word(uint4& r, int q) { return reinterpret_cast<uint32_t*>(&r)[q]; }
__device__ inline uint32_t Word(const uint4& r, int q) { return reinterpret_cast<const uint32_t*>(&r)[q]; }

// Whether v replaces the running maximum m: v is larger or NaN, and m is
// not NaN yet (the first maximum, and the first NaN, win).
__device__ inline bool Takes(float v, float m) { return (v > m || v != v) && m == m; }

// The window's running result over one thread's N channels: Add(raw, pos)
// per input in window order, then Store. pos (the input's flat spatial
// position) is used by the indexed max only.
template <typename T, bool kVec>
struct AvgAcc {
  using P = Pack<T, kVec>;
  float s[P::N];
  __device__ explicit AvgAcc(int) {
#pragma unroll
    for (int e = 0; e < P::N; ++e) s[e] = 0.0f;
  }
  __device__ void Add(const typename P::Raw& r, int) {
    float v[P::N];
    P::Unpack(r, v);
#pragma unroll
    for (int e = 0; e < P::N; ++e) s[e] += v[e];
  }
  __device__ void Store(T* y, int32_t*, float div) {
#pragma unroll
    for (int e = 0; e < P::N; ++e) s[e] /= div;
    P::Store(y, s);
  }
};

// Max without an index: 16-bit vectors stay packed (max.NaN on pairs, exact);
// float32 and single elements compare in float32.
template <typename T, bool kVec, bool kPacked = kVec && sizeof(T) == 2>
struct MaxAcc {
  using P = Pack<T, kVec>;
  float m[P::N];
  __device__ explicit MaxAcc(int) {
#pragma unroll
    for (int e = 0; e < P::N; ++e) m[e] = -INFINITY;
  }
  __device__ void Add(const typename P::Raw& r, int) {
    float v[P::N];
    P::Unpack(r, v);
#pragma unroll
    for (int e = 0; e < P::N; ++e) m[e] = v[e] > m[e] || v[e] != v[e] ? v[e] : m[e];
  }
  __device__ void Store(T* y, int32_t*, float) { P::Store(y, m); }
};

template <typename T>
struct MaxAcc<T, true, true> {
  uint4 m;
  __device__ explicit MaxAcc(int) {
    m = make_uint4(Half2Of<T>::kNegInf, Half2Of<T>::kNegInf, Half2Of<T>::kNegInf, Half2Of<T>::kNegInf);
  }
  __device__ void Add(const uint4& r, int) {
#pragma unroll
    for (int q = 0; q < 4; ++q)
      Word(m, q) = AsWord<T>(__hmax2_nan(AsPair<T>(Word(m, q)), AsPair<T>(Word(r, q))));
  }
  __device__ void Store(T* y, int32_t*, float) { StoreStream(y, m); }
};

// N int32 indices, as 16-byte stores where N is whole vectors of four (the
// vector path's rows and columns are 16-byte aligned).
template <int N>
__device__ inline void StoreIndex(int32_t* p, const int32_t (&v)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int q = 0; q < N / 4; ++q) {
      StoreStream(p + 4 * q, make_uint4(uint32_t(v[4 * q]), uint32_t(v[4 * q + 1]), uint32_t(v[4 * q + 2]),
                                        uint32_t(v[4 * q + 3])));
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) p[e] = v[e];
  }
}

// Max with the first maximum's index. The index starts at the window's first
// input (-1 for a window of padding only), the value at -inf: a window of
// -inf keeps its first position, as the first-maximum rule says.
template <typename T, bool kVec, bool kPacked = kVec && sizeof(T) == 2>
struct MaxIndexAcc {
  using P = Pack<T, kVec>;
  float m[P::N];
  int32_t at[P::N];
  __device__ explicit MaxIndexAcc(int first) {
#pragma unroll
    for (int e = 0; e < P::N; ++e) {
      m[e] = -INFINITY;
      at[e] = first;
    }
  }
  __device__ void Add(const typename P::Raw& r, int pos) {
    float v[P::N];
    P::Unpack(r, v);
#pragma unroll
    for (int e = 0; e < P::N; ++e) {
      const bool take = Takes(v[e], m[e]);
      m[e] = take ? v[e] : m[e];
      at[e] = take ? pos : at[e];
    }
  }
  __device__ void Store(T* y, int32_t* index, float) {
    P::Store(y, m);
    StoreIndex<P::N>(index, at);
  }
};

template <typename T>
struct MaxIndexAcc<T, true, true> {
  uint4 m;
  int32_t at[8];
  __device__ explicit MaxIndexAcc(int first) {
    m = make_uint4(Half2Of<T>::kNegInf, Half2Of<T>::kNegInf, Half2Of<T>::kNegInf, Half2Of<T>::kNegInf);
#pragma unroll
    for (int e = 0; e < 8; ++e) at[e] = first;
  }
  __device__ void Add(const uint4& r, int pos) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const auto v = AsPair<T>(Word(r, q)), cur = AsPair<T>(Word(m, q));
      // Per half: v > m or unordered, and m not NaN (Takes on pairs).
      const uint32_t take = __hgtu2_mask(v, cur) & ~__hneu2_mask(cur, cur);
      Word(m, q) = (Word(r, q) & take) | (Word(m, q) & ~take);
      at[2 * q] = (take & 0xffffu) != 0 ? pos : at[2 * q];
      at[2 * q + 1] = (take >> 16) != 0 ? pos : at[2 * q + 1];
    }
  }
  __device__ void Store(T* y, int32_t* index, float) {
    StoreStream(y, m);
    StoreIndex<8>(index, at);
  }
};

template <typename T, bool kVec, Op kOp>
using AccOf = std::conditional_t<kOp == Op::kAvg, AvgAcc<T, kVec>,
                                 std::conditional_t<kOp == Op::kMax, MaxAcc<T, kVec>, MaxIndexAcc<T, kVec>>>;

// Window loads a thread keeps in flight (one batch is issued before any of
// it is used): as many as 64 registers hold with the rest (4 blocks of 256
// threads an SM; ptxas -v: no spills).
template <typename T, bool kVec, Op kOp>
constexpr int FwdBatch() {
  return kOp == Op::kMaxIndex ? 4 : kOp == Op::kAvg && kVec ? 6 : 7;
}

// grid: x over channel units, y over (sample, output position) pairs. Per
// pair, the window's planes of (dim 1, dim 2) inputs are walked flat with
// incremental counters in batches of FwdBatch loads, in window order (the
// first maximum wins; avg adds in window order).
template <typename T, bool kVec, Op kOp>
__global__ void __launch_bounds__(256, 4)
    FwdKernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ index, Geo g, Step step) {
  using P = Pack<T, kVec>;
  constexpr int kB = FwdBatch<T, kVec, kOp>();
  const int64_t col64 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * P::N;
  if (col64 >= g.channels) return;
  const int col = int(col64);
  for (PairWalk w(int64_t(blockIdx.y) * blockDim.y + threadIdx.y, g.out, g.out_div_positions); w.n < g.batch;
       w.Advance(step, g.out)) {
    const Span s0 = ClampedWindow(g, 0, w.p[0]), s1 = ClampedWindow(g, 1, w.p[1]),
               s2 = ClampedWindow(g, 2, w.p[2]);
    const int plane = s1.count * s2.count;
    // Flat input positions: along dim 2 by s2.step, from a plane row's end
    // to the next row's start by `wrap`; an input's channels at pos * C.
    const int wrap = s1.step * g.in[2] - (s2.count - 1) * s2.step;
    const int first = (s0.first * g.in[1] + s1.first) * g.in[2] + s2.first;
    AccOf<T, kVec, kOp> acc(s0.count * plane > 0 ? first : -1);
    const T* xs = x + w.n * g.in_positions * g.channels + col;
    const int row_bytes = g.channels * int(sizeof(T));
    // The window's rows along dim 0, each plane walked in batches of kB
    // loads (`left` of them real in the last, guarded one); the load's cache
    // hint a compile-time choice, one branch an output.
    auto walk = [&](auto overlap) {
      for (int j0 = 0, row = first; j0 < s0.count; ++j0, row += s0.step * g.in[1] * g.in[2]) {
        int pos = row, j2 = 0;
        auto batch = [&](auto guarded, int left) {
          typename P::Raw raw[kB];
          int at[kB];
#pragma unroll
          for (int b = 0; b < kB; ++b) {
            if (!decltype(guarded)::value || b < left) {
              raw[b] = LoadX<T, kVec>(AtRow(xs, pos, row_bytes), decltype(overlap)::value);
              at[b] = pos;
              const bool end = ++j2 == s2.count;
              pos += end ? wrap : s2.step;
              j2 = end ? 0 : j2;
            }
          }
#pragma unroll
          for (int b = 0; b < kB; ++b) {
            if (!decltype(guarded)::value || b < left) acc.Add(raw[b], at[b]);
          }
        };
        int f = 0;
        for (; f + kB <= plane; f += kB) batch(std::false_type{}, kB);
        if (f < plane) batch(std::true_type{}, plane - f);
      }
    };
    if (g.overlap) {
      walk(std::true_type{});
    } else {
      walk(std::false_type{});
    }
    const float div = kOp != Op::kAvg ? 1.0f : g.const_divisor ? g.window_size : float(s0.count * plane);
    const int o = (w.p[0] * g.out[1] + w.p[1]) * g.out[2] + w.p[2];
    const int64_t out = (w.n * g.out_positions + o) * g.channels + col;
    acc.Store(y + out, kOp == Op::kMaxIndex ? index + out : nullptr, div);
  }
}

// Whole-input average pooling (one output position a sample covering every
// input position, no padding: global average pooling) as a column
// reduction. A block takes (sample, chunk of channel units): its blockDim.x
// threads split the chunk, its blockDim.y lanes the positions (lane l adds
// positions l, l + blockDim.y, ... in order, kGlobalBatch loads in flight),
// and lane 0 adds the lanes' sums in lane order: a fixed order, so the result
// never depends on scheduling.
constexpr int kGlobalBatch = 8;

template <typename T, bool kVec>
__global__ void __launch_bounds__(256)
    GlobalAvgFwdKernel(const T* __restrict__ x, T* __restrict__ y, int64_t batch, int64_t channels,
                       int positions, float div) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  __shared__ float lanes[256 * N];
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  const bool live = col < channels;
  float* mine = lanes + (threadIdx.y * blockDim.x + threadIdx.x) * N;
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    float s[N];
#pragma unroll
    for (int e = 0; e < N; ++e) s[e] = 0.0f;
    if (live) {
      const T* xs = x + n * positions * channels + col;
      for (int r0 = threadIdx.y; r0 < positions; r0 += kGlobalBatch * int(blockDim.y)) {
        typename P::Raw raw[kGlobalBatch];
#pragma unroll
        for (int b = 0; b < kGlobalBatch; ++b) {
          const int r = r0 + b * int(blockDim.y);
          if (r < positions) raw[b] = P::Load(xs + int64_t(r) * channels);
        }
#pragma unroll
        for (int b = 0; b < kGlobalBatch; ++b) {
          if (r0 + b * int(blockDim.y) < positions) {
            float v[N];
            P::Unpack(raw[b], v);
#pragma unroll
            for (int e = 0; e < N; ++e) s[e] += v[e];
          }
        }
      }
    }
#pragma unroll
    for (int e = 0; e < N; ++e) mine[e] = s[e];
    __syncthreads();
    if (threadIdx.y == 0 && live) {
      for (int l = 1; l < int(blockDim.y); ++l) {
        const float* theirs = lanes + (l * blockDim.x + threadIdx.x) * N;
#pragma unroll
        for (int e = 0; e < N; ++e) s[e] += theirs[e];
      }
#pragma unroll
      for (int e = 0; e < N; ++e) s[e] /= div;
      P::Store(y + n * channels + col, s);
    }
    __syncthreads();
  }
}

// Its backward: dx = dy / count at every position (the gather's 0 + dy / count
// for a window of all positions), a streaming write. grid: x over channel
// chunks, y over samples, z over runs of positions.
template <typename T, bool kVec>
__global__ void __launch_bounds__(256)
    GlobalAvgBwdKernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t batch, int64_t channels,
                       int positions, float div) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (col >= channels) return;
  const int first = blockIdx.z * blockDim.y + threadIdx.y, stride = gridDim.z * blockDim.y;
  if (first >= positions) return;
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    float d[N];
    P::Unpack(LoadX<T, kVec>(dy + n * channels + col, true), d);
#pragma unroll
    for (int e = 0; e < N; ++e) d[e] = 0.0f + d[e] / div;
    T* out = dx + n * positions * channels + col;
    if constexpr (kVec) {
      const uint4 v = Vec16<T>::Pack(d);
      for (int r = first; r < positions; r += stride) StoreStream(out + int64_t(r) * channels, v);
    } else {
      for (int r = first; r < positions; r += stride) P::Store(out + int64_t(r) * channels, d);
    }
  }
}

// The outputs along dim k whose windows hold input i: lo, lo + step, ...
// (count of them). Not adaptive: o stride - pad + j dilation = i for a
// j < window, so o runs over [ceil((i + pad - span) / stride), floor((i +
// pad) / stride)] (multiply-shift divisions), every d / gcd(s, d)-th of them
// with dilation d; adaptive: floor(i out / in) <= o < ceil((i + 1) out / in).
struct Range {
  int lo, step, count;
};
__device__ inline Range Holders(const Geo& g, int k, int i) {
  if (g.adaptive) {
    const int lo = int(g.in_div[k].Div(int64_t(i) * g.out[k]));
    const int hi = int(min(int64_t(g.out[k]), g.in_div[k].Div(int64_t(i + 1) * g.out[k] + g.in[k] - 1)));
    return {lo, 1, hi - lo};
  }
  const int s = g.stride[k], d = g.dilation[k], top = i + g.pad_lo[k];
  const int num = top - (g.window[k] - 1) * d;
  int lo = num <= 0 ? 0 : g.stride_div[k].Div(num + s - 1);
  const int hi = min(g.out[k] - 1, g.stride_div[k].Div(top));
  if (d == 1) return {lo, 1, max(hi - lo + 1, 0)};
  // Fewer than `period` trials find the first holder (top - o s a multiple of d).
  while (lo <= hi && (top - lo * s) % d != 0) ++lo;
  const int period = g.holder_period[k];
  return {lo, period, lo <= hi ? (hi - lo) / period + 1 : 0};
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
    for (int e = 0; e < N; ++e) out[e] = __ldg(p + e);
  }
}

enum class Grad { kMax, kAvg, kAvgSized };  // kAvg: one divisor; kAvgSized: each window's size

// Holders a thread loads before using any (dy, and for max the index: 12
// registers a holder of 16-bit dy): as many as 64 registers hold with the
// rest (ptxas -v: no spills).

template <typename T, bool kVec, Grad kGrad>
constexpr int BwdBatch() {
  return kVec && kGrad != Grad::kAvg ? 2 : 6;
}

// grid: x over channel units, y over (sample, input position) pairs. Per
// pair, the holders' planes of (dim 1, dim 2) outputs are walked flat with
// incremental counters, in output order (avg: dy / count added in that
// order; max: dy where the output's index names this input).
template <typename T, bool kVec, Grad kGrad>
__global__ void __launch_bounds__(256, 4)
    BwdKernel(const T* __restrict__ dy, const int32_t* __restrict__ index, T* __restrict__ dx, Geo g,
              Step step) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N, kB = BwdBatch<T, kVec, kGrad>();
  constexpr bool kMax = kGrad == Grad::kMax;
  constexpr int kIdx = kMax ? N : 1;  // index words a holder
  const int64_t col64 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (col64 >= g.channels) return;
  const int col = int(col64);
  for (PairWalk w(int64_t(blockIdx.y) * blockDim.y + threadIdx.y, g.in, g.in_div_positions); w.n < g.batch;
       w.Advance(step, g.in)) {
    const Range r0 = Holders(g, 0, w.p[0]), r1 = Holders(g, 1, w.p[1]), r2 = Holders(g, 2, w.p[2]);
    const int plane = r1.count * r2.count;
    const int i = (w.p[0] * g.in[1] + w.p[1]) * g.in[2] + w.p[2];
    // Flat output positions: along dim 2 by r2.step, from a plane row's end
    // to the next row's start by `wrap`; an output's channels at pos * C.
    const int wrap = r1.step * g.out[2] - (r2.count - 1) * r2.step;
    const int64_t sample = w.n * g.out_positions * g.channels + col;
    const T* dys = dy + sample;
    const int32_t* idxs = kMax ? index + sample : nullptr;
    const int row_bytes = g.channels * int(sizeof(T)), index_bytes = g.channels * 4;
    float acc[N];
#pragma unroll
    for (int e = 0; e < N; ++e) acc[e] = 0.0f;
    for (int a0 = 0, o0 = r0.lo; a0 < r0.count; ++a0, o0 += r0.step) {
      const int size0 = kGrad == Grad::kAvgSized ? ClampedWindow(g, 0, o0).count : 1;
      int pos = (o0 * g.out[1] + r1.lo) * g.out[2] + r2.lo, a2 = 0;
      int o1 = r1.lo, o2 = r2.lo, u2 = 0;  // kAvgSized: the holder being added, (o1, o2)
      // Batches of kB holders (`left` of them real in the last, guarded one).
      auto batch = [&](auto guarded, int left) {
        typename P::Raw raw[kB];
        int32_t idx[kB][kIdx];
#pragma unroll
        for (int b = 0; b < kB; ++b) {
          if (!decltype(guarded)::value || b < left) {
            raw[b] = LoadX<T, kVec>(AtRow(dys, pos, row_bytes), true);
            if constexpr (kMax) LoadIndex<N>(AtRow(idxs, pos, index_bytes), idx[b]);
            const bool end = ++a2 == r2.count;
            pos += end ? wrap : r2.step;
            a2 = end ? 0 : a2;
          }
        }
#pragma unroll
        for (int b = 0; b < kB; ++b) {
          if (!decltype(guarded)::value || b < left) {
            float d[N];
            P::Unpack(raw[b], d);
            float div = g.window_size;
            if constexpr (kGrad == Grad::kAvgSized) {
              div = float(size0 * ClampedWindow(g, 1, o1).count * ClampedWindow(g, 2, o2).count);
              const bool end = ++u2 == r2.count;
              o1 += end ? r1.step : 0;
              o2 = end ? r2.lo : o2 + r2.step;
              u2 = end ? 0 : u2;
            }
#pragma unroll
            for (int e = 0; e < N; ++e) {
              if constexpr (kMax) {
                acc[e] += idx[b][e] == i ? d[e] : 0.0f;
              } else {
                acc[e] += d[e] / div;
              }
            }
          }
        }
      };
      int f = 0;
      for (; f + kB <= plane; f += kB) batch(std::false_type{}, kB);
      if (f < plane) batch(std::true_type{}, plane - f);
    }
    P::Store(dx + (w.n * g.in_positions + i) * g.channels + col, acc);
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

// Whether the kernels' 32-bit position arithmetic holds: a sample's
// positions, every attribute, and every window's reach.
bool Fits32(const PoolGeometry& g) {
  if (g.in_positions() > INT32_MAX || g.out_positions() > INT32_MAX || g.channels > INT32_MAX / 4 - 256) {
    return false;  // positions, and a position's bytes (4 C), in 32 bits
  }
  for (int k = 0; k < 3; ++k) {
    for (int64_t v : {g.in[k], g.out[k], g.window[k], g.stride[k], g.dilation[k], g.pad_lo[k]}) {
      if (v > INT32_MAX) return false;
    }
    if ((g.out[k] + 1) * g.stride[k] + g.window[k] * g.dilation[k] + g.pad_lo[k] + g.in[k] > INT32_MAX) {
      return false;
    }
  }
  return true;
}

int64_t Gcd(int64_t a, int64_t b) { return b == 0 ? a : Gcd(b, a % b); }

Geo GeoOf(const PoolGeometry& g) {
  Geo d;
  d.overlap = g.adaptive;
  for (int k = 0; k < 3; ++k) {
    d.in[k] = int(g.in[k]);
    d.out[k] = int(g.out[k]);
    d.window[k] = int(g.window[k]);
    d.stride[k] = int(g.stride[k]);
    d.dilation[k] = int(g.dilation[k]);
    d.pad_lo[k] = int(g.pad_lo[k]);
    d.stride_div[k] = FastDiv(g.stride[k]);
    d.in_div[k] = FastDiv64(std::max<int64_t>(g.in[k], 1));
    d.out_div[k] = FastDiv64(std::max<int64_t>(g.out[k], 1));
    d.holder_period[k] = int(g.dilation[k] / Gcd(g.stride[k], g.dilation[k]));
    d.overlap |= g.out[k] > 1 && g.stride[k] < (g.window[k] - 1) * g.dilation[k] + 1;
  }
  d.in_positions = int(g.in_positions());
  d.in_div_positions = FastDiv64(std::max<int64_t>(g.in_positions(), 1));
  d.out_div_positions = FastDiv64(std::max<int64_t>(g.out_positions(), 1));
  d.out_positions = int(g.out_positions());
  d.batch = g.batch;
  d.channels = int(g.channels);
  d.window_size = float(g.window[0] * g.window[1] * g.window[2]);
  d.const_divisor = g.count_include_pad && !g.adaptive;
  d.adaptive = g.adaptive;
  return d;
}

// One output position a sample covering every input position, no padding,
// averaged: global average pooling (the column reduction's case).
bool WholeInputAverage(const PoolGeometry& g) {
  if (g.max || g.out_positions() != 1) return false;
  for (int k = 0; k < 3; ++k) {
    if (g.adaptive) continue;  // one output along each dim spans the input
    if (g.pad_lo[k] != 0 || g.window[k] != g.in[k] || (g.window[k] > 1 && g.dilation[k] != 1)) return false;
  }
  return true;
}

}  // namespace

LaunchStatus PoolFwdCuda(const PoolFwdArgs& p, cudaStream_t stream) {
  const int64_t pairs = p.g.batch * p.g.out_positions();
  if (pairs == 0 || p.g.channels == 0) return cudaSuccess;
  if (!Fits32(p.g)) return LaunchStatus::Refused("a sample's positions or a window's reach pass 2^31 - 1");
  const GridPlan plan = MakeGridPlan(pairs, p.g.channels, p.g.channels, ffi::ByteWidth(p.dtype));
  if (WholeInputAverage(p.g)) {
    const int positions = int(p.g.in_positions());
    const dim3 grid(unsigned(plan.col_blocks), unsigned(std::min<int64_t>(p.g.batch, kGridYLimit)));
    return ByDtypeVec(p.dtype, plan.vec, [&](auto t, auto v) -> LaunchStatus {
      using T = decltype(t);
      GlobalAvgFwdKernel<T, decltype(v)::value>
          <<<grid, Block(plan), 0, stream>>>(static_cast<const T*>(p.x), static_cast<T*>(p.y), p.g.batch,
                                             p.g.channels, positions, float(positions));
      return Checked();
    });
  }
  const Geo g = GeoOf(p.g);
  const Step step = StepOf(plan.row_blocks * plan.ty, g.out);
  return ByDtypeVec(p.dtype, plan.vec, [&](auto t, auto v) -> LaunchStatus {
    using T = decltype(t);
    constexpr bool kVec = decltype(v)::value;
    auto launch = [&](auto kernel) {
      kernel<<<Grid(plan), Block(plan), 0, stream>>>(static_cast<const T*>(p.x), static_cast<T*>(p.y),
                                                     p.index, g, step);
      return Checked();
    };
    if (!p.g.max) return launch(FwdKernel<T, kVec, Op::kAvg>);
    if (p.index == nullptr) return launch(FwdKernel<T, kVec, Op::kMax>);
    return launch(FwdKernel<T, kVec, Op::kMaxIndex>);
  });
}

LaunchStatus PoolBwdCuda(const PoolBwdArgs& p, cudaStream_t stream) {
  const int64_t pairs = p.g.batch * p.g.in_positions();
  if (pairs == 0 || p.g.channels == 0) return cudaSuccess;
  if (!Fits32(p.g)) return LaunchStatus::Refused("a sample's positions or a window's reach pass 2^31 - 1");
  const GridPlan plan = MakeGridPlan(pairs, p.g.channels, p.g.channels, ffi::ByteWidth(p.dtype));
  if (WholeInputAverage(p.g)) {
    const int positions = int(p.g.in_positions());
    const int64_t samples = std::min<int64_t>(p.g.batch, kGridYLimit);
    const int64_t runs = std::clamp<int64_t>(CeilDiv(2 * kResidentBlocks, plan.col_blocks * samples), 1,
                                             std::min<int64_t>(CeilDiv(positions, plan.ty), kGridYLimit));
    const dim3 grid(unsigned(plan.col_blocks), unsigned(samples), unsigned(runs));
    return ByDtypeVec(p.dtype, plan.vec, [&](auto t, auto v) -> LaunchStatus {
      using T = decltype(t);
      GlobalAvgBwdKernel<T, decltype(v)::value>
          <<<grid, Block(plan), 0, stream>>>(static_cast<const T*>(p.dy), static_cast<T*>(p.dx), p.g.batch,
                                             p.g.channels, positions, float(positions));
      return Checked();
    });
  }
  const Geo g = GeoOf(p.g);
  const Step step = StepOf(plan.row_blocks * plan.ty, g.in);
  return ByDtypeVec(p.dtype, plan.vec, [&](auto t, auto v) -> LaunchStatus {
    using T = decltype(t);
    constexpr bool kVec = decltype(v)::value;
    auto launch = [&](auto kernel) {
      kernel<<<Grid(plan), Block(plan), 0, stream>>>(static_cast<const T*>(p.dy), p.index,
                                                     static_cast<T*>(p.dx), g, step);
      return Checked();
    };
    if (p.g.max) return launch(BwdKernel<T, kVec, Grad::kMax>);
    if (g.const_divisor) return launch(BwdKernel<T, kVec, Grad::kAvg>);
    return launch(BwdKernel<T, kVec, Grad::kAvgSized>);
  });
}

}  // namespace jaxdnn::pooling
