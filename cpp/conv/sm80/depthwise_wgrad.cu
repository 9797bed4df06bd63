// The depthwise weight gradient (depthwise_wgrad.h).
#include "conv/sm80/depthwise_wgrad.h"

#include <algorithm>
#include <cstdint>

#include "conv/sm80/depthwise_common.cuh"
#include "conv/sm80/depthwise_fwd.h"
#include "conv/sm80/depthwise_tiled.cuh"

namespace jaxdnn::conv {
namespace {

constexpr int kWgTaps = 9;     // taps a pass sums in registers
constexpr int kWgParts = 256;  // CTAs a channel block's tiles are split over (at most)

// The launcher's plan: the forward's tiles, each CTA a run of per_cta of
// them (at most kWgParts CTAs a channel block), the partials' bytes.
struct WgradPlan {
  DwParams d{};
  DwTile tile;
  int64_t taps = 0;
  size_t partial_bytes = 0;
  size_t smem = 0;
};

WgradPlan PlanOf(const DepthwiseWgradArgs& p) {
  WgradPlan w;
  SetDwGeometry(p.g, DwVecOf(p.dtype), w.d);
  w.taps = p.g.taps();
  if (w.d.total == 0) return w;
  w.tile = ChooseDwTile(w.d);
  if (!w.tile.ok()) return w;
  DwTile& t = w.tile;
  t.per_cta = int((t.tiles_total + kWgParts - 1) / kWgParts);
  t.grid_x = (t.tiles_total + t.per_cta - 1) / t.per_cta;
  w.partial_bytes = size_t(t.grid_x) * w.taps * p.g.in_channels * sizeof(float);
  // The patches' two stages, or the reduction's [warps][taps][cvb * E] floats.
  const size_t reduce = size_t(kDwThreads / 32) * kWgTaps * t.cvb * DwVecOf(p.dtype) * sizeof(float);
  w.smem = std::max(t.smem, reduce);
  return w;
}

// Taps [tap0, tap0 + ntaps) (flattened over depth, rows, columns) of the
// CTA's run of tiles, pipelined over (tile, input slice) items as the
// forward; then summed over the CTA's threads in a fixed order into
// partials[blockIdx.x][tap][c].
template <typename T>
__global__ void __launch_bounds__(kDwThreads, 2)
    DepthwiseWgradPartials(DwParams p, DwTile t, const T* __restrict__ dz, float* __restrict__ partials,
                           int taps, int tap0, int ntaps) {
  constexpr int E = Vec16<T>::kElems;
  extern __shared__ uint4 patches[];
  const int64_t end = min(int64_t(blockIdx.x + 1) * t.per_cta, t.tiles_total);
  const DwThread me(p, t);
  const int cv0 = me.cv0, v = me.v, r = me.r, c = me.c;
  const int plane = p.window[1] * p.window[2];
  const int tap_d0 = tap0 / plane, tap_h0 = tap0 % plane / p.window[2], tap_w0 = tap0 % p.window[2];

  float acc[kWgTaps][E];
#pragma unroll
  for (int i = 0; i < kWgTaps; ++i)
#pragma unroll
    for (int e = 0; e < E; ++e) acc[i][e] = 0.0f;
  float g[kDwStrip][E];

  PatchPipeline<T> pipe(p, t, patches, cv0, int64_t(blockIdx.x) * t.per_cta, end);
  while (true) {
    pipe.IssueNext();
    const int kd = pipe.kd;
    const DwTileAt& at = pipe.at;
    const int oh = me.Row(t, at);
    const bool active = me.Active(p, t, at);
    if (kd == 0) {  // the tile's dz, while its first patch lands
#pragma unroll
      for (int j = 0; j < kDwStrip; ++j) {
        const int ow = at.ow0 + t.q[2] * (c + j);
        if (active && ow < p.out[2]) {
          const int64_t at_dz = (((at.n * p.out[0] + at.od) * p.out[1] + oh) * p.out[2] + ow) * p.channels +
                                int64_t(cv0 + v) * E;
          UnpackFast<T>(__ldg(reinterpret_cast<const uint4*>(dz + at_dz)), g[j]);
        } else {
#pragma unroll
          for (int e = 0; e < E; ++e) g[j][e] = 0.0f;
        }
      }
    }
    pipe.WaitCurrent();
    if (pipe.have && active) {
      const uint4* patch = pipe.patch();
      const int j_step = t.se[2] * t.cvb;
      // The taps' (depth, row, column), stepped from tap0's (no division).
      int td = tap_d0, th = tap_h0, tw = tap_w0;
#pragma unroll
      for (int i = 0; i < kWgTaps; ++i) {
        if (i < ntaps && td == kd) {
          const uint4* xp = patch + ((r * t.se[1] + th) * t.halo[2] + c * t.se[2] + tw) * t.cvb + v;
#pragma unroll
          for (int j = 0; j < kDwStrip; ++j) {
            float xf[E];
            UnpackFast<T>(xp[j * j_step], xf);
#pragma unroll
            for (int e = 0; e < E; ++e) acc[i][e] = fmaf(xf[e], g[j][e], acc[i][e]);
          }
        }
        if (++tw == p.window[2]) {
          tw = 0;
          if (++th == p.window[1]) {
            th = 0;
            ++td;
          }
        }
      }
    }
    if (pipe.last()) break;
    pipe.Advance();
  }
  // The CTA's sum: over the lanes of a warp that share a channel vector (xor
  // butterfly, a fixed order), then over the warps in order.
  __syncthreads();                                 // the patches' memory becomes the reduction's
  float* red = reinterpret_cast<float*>(patches);  // [warps][kWgTaps][cvb * E]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, width = t.cvb * E;
#pragma unroll
  for (int i = 0; i < kWgTaps; ++i) {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      float s = acc[i][e];
      for (int off = t.cvb; off < 32; off <<= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane < t.cvb && i < ntaps) red[(warp * kWgTaps + i) * width + lane * E + e] = s;
    }
  }
  __syncthreads();
  for (int k = threadIdx.x; k < ntaps * width; k += blockDim.x) {
    const int i = k / width, ce = k % width;
    if (cv0 * E + ce >= p.channels) continue;
    float s = 0.0f;
    for (int w8 = 0; w8 < kDwThreads / 32; ++w8) s += red[(w8 * kWgTaps + i) * width + ce];
    partials[(int64_t(blockIdx.x) * taps + tap0 + i) * p.channels + int64_t(cv0) * E + ce] = s;
  }
}

// dw[i] = alpha * the sum of the parts' partials[b][i] in order (four
// running sums over b mod 4, combined the same way every call).
template <typename OT>
__global__ void DepthwiseWgradReduce(const float* __restrict__ partials, int64_t parts, int64_t n, OT* dw,
                                     float alpha) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int64_t b = 0;
  for (; b + 4 <= parts; b += 4)
#pragma unroll
    for (int u = 0; u < 4; ++u) s[u] += partials[(b + u) * n + i];
  for (; b < parts; ++b) s[b & 3] += partials[b * n + i];
  Vec16<OT>::Store1(dw + i, alpha * ((s[0] + s[1]) + (s[2] + s[3])));
}

template <typename T, typename OT>
LaunchStatus Launch(const DepthwiseWgradArgs& a, const WgradPlan& w, cudaStream_t stream) {
  const DwTile& t = w.tile;
  DwParams d = w.d;  // the plan holds the geometry; the patches read x
  d.x = a.x;
  float* partials = static_cast<float*>(a.workspace);
  if (w.smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(DepthwiseWgradPartials<T>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, int(w.smem));
    if (err != cudaSuccess) return err;
  }
  for (int tap0 = 0; tap0 < w.taps; tap0 += kWgTaps) {
    const int ntaps = int(std::min<int64_t>(kWgTaps, w.taps - tap0));
    DepthwiseWgradPartials<T><<<dim3(unsigned(t.grid_x), unsigned(t.grid_y)), kDwThreads, w.smem, stream>>>(
        d, t, static_cast<const T*>(a.dz), partials, int(w.taps), tap0, ntaps);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  const int64_t n = w.taps * a.g.in_channels;
  DepthwiseWgradReduce<OT>
      <<<unsigned((n + 255) / 256), 256, 0, stream>>>(partials, t.grid_x, n, static_cast<OT*>(a.dw), a.alpha);
  return cudaGetLastError();
}

}  // namespace

const char* DepthwiseWgradRefusal(const DepthwiseWgradArgs& p) {
  const ConvGeometry& g = p.g;
  if (!IsDepthwise(g)) return "depthwise_wgrad: only depthwise convolutions (C_in == C_out == groups)";
  if (!DwIsFloat(p.dtype)) return "depthwise_wgrad: x and dz must be float32, bfloat16 or float16";
  if (p.dw_dtype != p.dtype && p.dw_dtype != ffi::DataType::F32)
    return "depthwise_wgrad: dw must have x's dtype or float32";
  if (g.in_channels % DwVecOf(p.dtype) != 0)
    return "depthwise_wgrad: the channels must be a multiple of 8 (16-bit) or 4 (float32)";
  for (int k = 0; k < 3; ++k) {
    if (g.in_dilation[k] != 1) return "depthwise_wgrad: no input dilation (transposed convolutions)";
    if (g.stride[k] < 1 || g.k_dilation[k] < 1)
      return "depthwise_wgrad: strides and dilations must be positive";
    if (g.in[k] >= (int64_t(1) << 30) || g.out[k] >= (int64_t(1) << 30) || g.window[k] >= (int64_t(1) << 30))
      return "depthwise_wgrad: a spatial size is too large";
  }
  const WgradPlan w = PlanOf(p);
  if (w.d.total > 0 && !w.tile.ok()) return "depthwise_wgrad: the input patch exceeds 48 KiB at every tile";
  if (w.tile.ok() && w.tile.grid_y > 65535) return "depthwise_wgrad: too many channel blocks";
  return nullptr;
}

size_t DepthwiseWgradWorkspace(const DepthwiseWgradArgs& p) { return PlanOf(p).partial_bytes; }

LaunchStatus DepthwiseWgradCuda(const DepthwiseWgradArgs& p, cudaStream_t stream) {
  if (const char* why = DepthwiseWgradRefusal(p)) return LaunchStatus::Refused(why);
  const WgradPlan w = PlanOf(p);
  const int64_t n = w.taps * p.g.in_channels;
  if (w.d.total == 0) {  // no positions: a zero gradient
    const size_t bytes = size_t(n) * (p.dw_dtype == ffi::DataType::F32 ? 4 : 2);
    return cudaMemsetAsync(p.dw, 0, bytes, stream);
  }
  if (p.workspace_bytes < w.partial_bytes || p.workspace == nullptr)
    return LaunchStatus::Refused("depthwise_wgrad: workspace smaller than DepthwiseWgradWorkspace");
  if (reinterpret_cast<uintptr_t>(p.x) % 16 != 0 || reinterpret_cast<uintptr_t>(p.dz) % 16 != 0)
    return LaunchStatus::Refused("depthwise_wgrad: x and dz must be 16-byte aligned");
  const bool wide = p.dw_dtype == ffi::DataType::F32;
  switch (p.dtype) {
    case ffi::DataType::F32: return Launch<float, float>(p, w, stream);
    case ffi::DataType::BF16:
      return wide ? Launch<__nv_bfloat16, float>(p, w, stream)
                  : Launch<__nv_bfloat16, __nv_bfloat16>(p, w, stream);
    case ffi::DataType::F16:
      return wide ? Launch<__half, float>(p, w, stream) : Launch<__half, __half>(p, w, stream);
    default: return LaunchStatus::Refused("depthwise_wgrad: x and dz must be float32, bfloat16 or float16");
  }
}

}  // namespace jaxdnn::conv
