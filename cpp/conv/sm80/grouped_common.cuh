// What the grouped convolution's tensor-core kernels share (grouped_fwd.cu,
// grouped_wgrad.cu): each CTA serves one group; each warp stages the
// window's rows of 16 output positions into shared memory, 16 bytes (8
// channels of the group at one tap) a copy, so the GEMM's K dimension is
// (tap, 8-channel chunk) and any stride, dilation, padding and 1-3 spatial
// dims reach the mma.sync m16n8k16 the same way. A group's 8-32 channels
// fill an m16n8 tile's N side (ResNeXt's 32 groups of 8 channels), which the
// implicit-GEMM convolution's 128-wide tiles cannot.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/activation.h"
#include "common/sm80/cp_async.cuh"
#include "common/sm80/mma.cuh"
#include "conv/problem.h"

namespace jaxdnn::conv {

constexpr int kGpWarps = 4;  // warps a CTA
constexpr int kGpRows = 16;  // output positions a warp tile (the mma's M)
constexpr int kGpMaxNt = 4;  // 8-wide N tiles a group: at most 32 output channels
constexpr int kGpMaxTaps = 512;

// Division by a divisor fixed for the launch, for dividends below 2^31: a
// multiply-high and a shift (the quotient of n / d is mulhi(n, mul) >> shr
// with mul = ceil(2^(31 + ceil(log2 d)) / d)). A 64-bit division is a
// software loop of some seventy instructions, and decoding a tile's rows
// took three of them a lane.
struct GpDiv {
  uint32_t d = 1, mul = 0, shr = 0;
  static GpDiv Of(int divisor) {
    GpDiv v;
    v.d = uint32_t(divisor);
    if (divisor > 1) {
      int l = 0;
      while ((1u << l) < v.d) ++l;
      const uint32_t p = 31 + uint32_t(l);
      v.mul = uint32_t(((uint64_t(1) << p) + v.d - 1) / v.d);
      v.shr = p - 32;
    }
    return v;
  }
  __device__ __forceinline__ uint32_t Div(uint32_t n) const { return d == 1 ? n : __umulhi(n, mul) >> shr; }
};

// The staged operand's geometry: rows are output positions of the problem
// (N * out positions of them), each reading `chunks` = taps * cpt 16-byte
// chunks of the input rows (cpt = channels a group reads / 8).
struct GpGeometry {
  const void* src;  // [N, in positions, channels]
  int64_t rows;     // N * out positions
  int64_t in_positions;
  int channels;  // the source's row pitch (C_in)
  int group_channels;
  int cpt_log2;
  int chunks, chunks_even;  // chunks_even: rounded up to whole k16 steps
  int taps;
  int in[3], stride[3], in_dil[3], pad_lo[3];
  int window[3], k_dil[3];
  GpDiv out_div[3];
  __host__ __device__ int out(int k) const { return int(out_div[k].d); }
};

inline int Log2Exact(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return (1 << l) == v ? l : -1;
}

// The window's 8-channel chunks of a group rounded up to an even count (an
// m16n8k16 step takes two).
inline int64_t GpChunksEven(const ConvGeometry& g) { return (g.taps() * (g.cin_g() / 8) + 1) & ~int64_t(1); }

inline GpGeometry GpGeometryOf(const ConvGeometry& g, const void* src) {
  GpGeometry s{};
  s.src = src;
  s.rows = g.batch * g.out_positions();
  s.in_positions = g.in_positions();
  s.channels = int(g.in_channels);
  s.group_channels = int(g.cin_g());
  s.cpt_log2 = Log2Exact(int(g.cin_g() / 8));
  s.taps = int(g.taps());
  s.chunks = int(g.taps() * (g.cin_g() / 8));
  s.chunks_even = int(GpChunksEven(g));
  for (int k = 0; k < 3; ++k) {
    s.in[k] = int(g.in[k]);
    s.stride[k] = int(g.stride[k]);
    s.in_dil[k] = int(g.in_dilation[k]);
    s.pad_lo[k] = int(g.pad_lo[k]);
    s.window[k] = int(g.window[k]);
    s.k_dil[k] = int(g.k_dilation[k]);
    s.out_div[k] = GpDiv::Of(int(g.out[k]));
  }
  return s;
}

// Each tap's offset into the padded, dilated input: (kd, kh, kw) * k_dil.
__device__ inline void FillTapTable(const GpGeometry& s, int4* taps) {
  for (int t = threadIdx.x; t < s.taps; t += blockDim.x) {
    const int kw = t % s.window[2], kh = (t / s.window[2]) % s.window[1],
              kd = t / (s.window[2] * s.window[1]);
    taps[t] = make_int4(kd * s.k_dil[0], kh * s.k_dil[1], kw * s.k_dil[2], 0);
  }
}

// One staged row: where its output position's window starts in the padded
// input, and its image's first element of the group's channels.
template <typename T>
struct GpRow {
  const T* base;
  int bd, bh, bw;
  bool live;
};

template <typename T>
__device__ __forceinline__ GpRow<T> DecodeRow(const GpGeometry& s, int group, int64_t position) {
  GpRow<T> r;
  r.live = position < s.rows;
  uint32_t rest = r.live ? uint32_t(position) : 0u;
  uint32_t q = s.out_div[2].Div(rest);
  const int ow = int(rest - q * s.out_div[2].d);
  rest = q;
  q = s.out_div[1].Div(rest);
  const int oh = int(rest - q * s.out_div[1].d);
  rest = q;
  q = s.out_div[0].Div(rest);
  const int od = int(rest - q * s.out_div[0].d);
  const int64_t n = q;
  r.bd = od * s.stride[0] - s.pad_lo[0];
  r.bh = oh * s.stride[1] - s.pad_lo[1];
  r.bw = ow * s.stride[2] - s.pad_lo[2];
  r.base = static_cast<const T*>(s.src) + n * s.in_positions * s.channels + int64_t(group) * s.group_channels;
  return r;
}

// Coordinate p of the dilated input along one dim -> the input index, or -1
// for padding and (kInDil) dilation holes.
template <bool kInDil>
__device__ __forceinline__ int InputIndex(int p, int in, int dil) {
  if (kInDil) {
    if (p < 0 || p % dil != 0) return -1;
    p /= dil;
  }
  return unsigned(p) < unsigned(in) ? p : -1;
}

// Starts the copy of chunk c of row r into dst (16 bytes; zeros for
// padding, dilation holes, dead rows and chunks past the last).
template <bool kInDil, typename T>
__device__ __forceinline__ void StageChunk(const GpGeometry& s, const int4* taps, const GpRow<T>& r, int c,
                                           void* dst) {
  const T* src = r.base;
  bool valid = r.live && c < s.chunks;
  if (valid) {
    const int4 t = taps[c >> s.cpt_log2];
    const int cc = c & ((1 << s.cpt_log2) - 1);
    const int id = InputIndex<kInDil>(r.bd + t.x, s.in[0], s.in_dil[0]);
    const int ih = InputIndex<kInDil>(r.bh + t.y, s.in[1], s.in_dil[1]);
    const int iw = InputIndex<kInDil>(r.bw + t.z, s.in[2], s.in_dil[2]);
    valid = (id | ih | iw) >= 0;
    if (valid) src = r.base + int64_t((id * s.in[1] + ih) * s.in[2] + iw) * s.channels + cc * 8;
  }
  // Through L1: the window's taps read each input row up to taps times.
  CpAsync16L1(dst, src, valid ? 16 : 0);
}

// Where the grouped kernels serve a geometry (both need 8-channel chunks of
// a group on 16-byte boundaries): nullptr, or why not.
inline const char* GroupedGeometryRefusal(const ConvGeometry& g) {
  if (g.groups < 2 || (g.cin_g() == 1 && g.cout_g() == 1)) return "not a grouped (non-depthwise) convolution";
  if (g.cin_g() % 8 != 0 || Log2Exact(int(g.cin_g() / 8)) < 0 || g.cin_g() > 32)
    return "the channels a group reads must be 8, 16 or 32";
  if (g.cout_g() % 8 != 0 || g.cout_g() > 8 * kGpMaxNt)
    return "the channels a group writes must be 8-32, a multiple of 8";
  if (g.taps() > kGpMaxTaps) return "the window has more than 512 taps";
  if (g.batch * g.out_positions() >= (int64_t(1) << 31) || g.in_positions() >= (int64_t(1) << 31) ||
      g.out_positions() >= (int64_t(1) << 31))
    return "more than 2^31 output rows or input positions an image";
  for (int k = 0; k < 3; ++k) {
    if (g.stride[k] < 1 || g.in_dilation[k] < 1 || g.k_dilation[k] < 1)
      return "strides and dilations must be positive";
    if (g.in[k] >= (int64_t(1) << 30) || g.out[k] >= (int64_t(1) << 30) || g.window[k] >= (int64_t(1) << 16))
      return "a spatial size is too large";
  }
  return nullptr;
}

inline bool GpInputDilated(const ConvGeometry& g) {
  return g.in_dilation[0] != 1 || g.in_dilation[1] != 1 || g.in_dilation[2] != 1;
}

}  // namespace jaxdnn::conv
