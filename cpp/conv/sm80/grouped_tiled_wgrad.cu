// The tiled grouped weight gradient (grouped_wgrad.h): a CTA a channel slice
// and a share of the tiles of output positions. Per tile: the input window
// staged once (grouped_patch.cuh) and the tile's dz rows beside it; the GEMM
// K dimension is the positions, A = the window's rows read through
// transposing ldmatrix straight from the patch (each lane names its
// position's pixel), B = dz through transposing ldmatrix. Each warp owns up
// to kUnits (group, 16 window rows) accumulator units across all its tiles,
// so no two warps add into the same sums; a CTA writes one float32 partial
// and GroupedWgradReduce adds the CTAs' partials in order: deterministic.
#include <algorithm>
#include <cstdint>

#include "conv/sm80/depthwise_common.cuh"
#include "conv/sm80/grouped_patch.cuh"
#include "conv/sm80/grouped_wgrad.h"
#include "conv/sm80/grouped_wgrad_reduce.cuh"
#include "conv/sm90/conv_sm90_workspace.h"

namespace jaxdnn::conv {
namespace {

constexpr int kUnits = 5;  // (group, 16 window rows) units a warp: up to 80 accumulators
// CTAs a launch: about one wave of two CTAs an SM on an H100 or H200. Fixed,
// not read from the device: the workspace (a partial a CTA) is sized by the
// plan query before any launch.
constexpr int64_t kTiledWgradCtas = 264;

struct GpTiledWgradParams {
  GpGeometry s;  // x's side (s.src: x)
  GpPatchPlan pl;
  const void* dz;        // [rows, C_out]
  float* partials;       // [groups, ctas a slice, taps * cin_g, cout_g]
  float* bias_partials;  // [groups, ctas a slice, cout_g] or null
  int out_channels, cout_g, nt, units;
};

// Shared memory (16-byte units): the patch; dz rows [positions][dline]
// (dline odd), zero for dead positions; each K chunk's offset from a window
// corner; the tile's window corners (a dead position reads the first
// position's window: finite inputs times its zero dz add nothing).
struct WgradLayout {
  int out_slice, vecs, dline;
  size_t patch, dz, koff, qbase, total;
};

__host__ __device__ inline WgradLayout WgradLayoutOf(const GpTiledWgradParams& p) {
  WgradLayout l;
  l.out_slice = p.pl.slice_groups * p.cout_g;
  l.vecs = l.out_slice / 8;
  l.dline = l.vecs % 2 == 1 ? l.vecs : l.vecs + 1;
  const int rows = p.pl.m_pairs * 2 * kGpRows;
  l.patch = 0;
  l.dz = l.patch + p.pl.patch_bytes() / 16;
  l.koff = l.dz + size_t(rows) * l.dline;
  l.qbase = l.koff + (p.s.chunks_even + 3) / 4;
  l.total = (l.qbase + rows / 4) * 16;
  return l;
}

template <typename T, int kNT>
__global__ void __launch_bounds__(kGpTiledWarps * 32) GroupedTiledWgradKernel(GpTiledWgradParams p) {
  extern __shared__ uint4 smem[];
  const GpPatchPlan& pl = p.pl;
  const WgradLayout l = WgradLayoutOf(p);
  uint4* patch = smem + l.patch;
  uint4* dzs = smem + l.dz;
  int* koff = reinterpret_cast<int*>(smem + l.koff);
  int* qbase = reinterpret_cast<int*>(smem + l.qbase);
  const int slice = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int cpt = 1 << p.s.cpt_log2, rows = pl.m_pairs * 2 * kGpRows;

  GpFillChunkOffsets(pl, p.s, koff);
  GpZeroPads(pl, patch);
  __syncthreads();  // the units' offsets below read koff

  float acc[kUnits][kNT][4];
#pragma unroll
  for (int u = 0; u < kUnits; ++u)
#pragma unroll
    for (int j = 0; j < kNT; ++j) acc[u][j][0] = acc[u][j][1] = acc[u][j][2] = acc[u][j][3] = 0.0f;
  float bias_sum = 0.0f;  // thread c < out_slice: channel c's dz sum

  const T* x = static_cast<const T*>(p.s.src);
  const T* dz = static_cast<const T*>(p.dz);
  const int mts = p.s.chunks_even / 2;
  // Transposing ldmatrix rows: A's lane reads position (lane & 7) + 8 (lane
  // >> 4) at window chunk + ((lane >> 3) & 1); B's reads position (lane & 7)
  // + 8 ((lane >> 3) & 1) at output chunk + (lane >> 4).
  const int a_pos = (lane & 7) + 8 * (lane >> 4), a_chunk = (lane >> 3) & 1;
  // Each unit's A offset (its window chunk in a pixel's line, or the pad
  // chunk past an odd chunk count) and B column, fixed for the whole kernel.
  int a_off[kUnits], b_col[kUnits];
#pragma unroll
  for (int u = 0; u < kUnits; ++u) {
    const int unit = min(warp + u * kGpTiledWarps, p.units - 1);
    const int gl = unit / mts, kc = 2 * (unit - gl * mts) + a_chunk;
    a_off[u] = kc < p.s.chunks ? koff[kc] + gl * cpt : pl.cpp;
    b_col[u] = gl * p.nt;
  }
  const int b_row = ((lane & 7) + 8 * ((lane >> 3) & 1)) * l.dline + (lane >> 4);
  for (int64_t tile = blockIdx.y; tile < pl.tiles; tile += gridDim.y) {
    const GpTile t = GpTileAt(pl, p.s.out(0), tile);
    GpStagePatch(pl, p.s, x, slice, t, patch);
    // dz rows (zeros for positions past the tile or the output) and the
    // window corners.
    for (int i = threadIdx.x; i < rows * l.vecs; i += blockDim.x) {
      const int q = i / l.vecs, v = i - q * l.vecs;
      const int tr = q / pl.tile_cols, tc = q - tr * pl.tile_cols;
      const bool live = q < pl.positions() && t.oh0 + tr < p.s.out(1) && t.ow0 + tc < p.s.out(2);
      const int64_t row =
          ((t.n * p.s.out(0) + t.od) * p.s.out(1) + t.oh0 + tr) * int64_t(p.s.out(2)) + t.ow0 + tc;
      const T* src = live ? dz + row * p.out_channels + int64_t(slice) * l.out_slice + v * 8 : dz;
      CpAsync16(dzs + q * l.dline + v, src, live ? 16 : 0);
      if (v == 0) qbase[q] = live ? (tr * p.s.stride[1] * pl.patch[2] + tc * p.s.stride[2]) * pl.line : 0;
    }
    CpAsyncCommit();
    CpAsyncWaitAll();
    __syncthreads();

    if (p.bias_partials != nullptr && threadIdx.x < l.out_slice) {
      const T* col = reinterpret_cast<const T*>(dzs) + threadIdx.x;
      for (int q = 0; q < rows; ++q) bias_sum += float(col[q * l.dline * 8]);
    }
    for (int ks = 0; ks < 2 * pl.m_pairs; ++ks) {
      const int pos = qbase[ks * kGpRows + a_pos];
      const uint4* brow = dzs + ks * kGpRows * l.dline + b_row;
#pragma unroll
      for (int u = 0; u < kUnits; ++u) {
        if (warp + u * kGpTiledWarps >= p.units) break;
        uint32_t a[4];
        sm80::LdMatrixX4Trans(a, patch + pos + a_off[u]);
        const uint4* b = brow + b_col[u];
#pragma unroll
        for (int j = 0; j < kNT; j += 2) {
          if (j + 1 < p.nt) {
            uint32_t bf[4];
            sm80::LdMatrixX4Trans(bf, b + j);
            sm80::MmaOp<T>::Run(acc[u][j], a, bf[0], bf[1]);
            sm80::MmaOp<T>::Run(acc[u][j + 1], a, bf[2], bf[3]);
          } else if (j < p.nt) {
            uint32_t bf[2];
            sm80::LdMatrixX2Trans(bf, b + j);
            sm80::MmaOp<T>::Run(acc[u][j], a, bf[0], bf[1]);
          }
        }
      }
    }
    __syncthreads();
  }

  // This CTA's partial: group g's window rows k, channels n.
  const int64_t wk = int64_t(p.s.chunks) * 8;
  const int gid = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int u = 0; u < kUnits; ++u) {
    const int unit = warp + u * kGpTiledWarps;
    if (unit >= p.units) break;
    const int gl = unit / mts, mt = unit - gl * mts;
    const int64_t g = int64_t(slice) * pl.slice_groups + gl;
    float* out = p.partials + (g * gridDim.y + blockIdx.y) * wk * p.cout_g;
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      if (j >= p.nt) break;
      const int n = j * 8 + tig * 2;
      const int64_t k0 = int64_t(mt) * 16 + gid;
      if (k0 < wk)
        *reinterpret_cast<float2*>(out + k0 * p.cout_g + n) = make_float2(acc[u][j][0], acc[u][j][1]);
      if (k0 + 8 < wk)
        *reinterpret_cast<float2*>(out + (k0 + 8) * p.cout_g + n) = make_float2(acc[u][j][2], acc[u][j][3]);
    }
  }
  if (p.bias_partials != nullptr && threadIdx.x < l.out_slice) {
    const int gl = threadIdx.x / p.cout_g, n = threadIdx.x - gl * p.cout_g;
    const int64_t g = int64_t(slice) * pl.slice_groups + gl;
    p.bias_partials[(g * gridDim.y + blockIdx.y) * p.cout_g + n] = bias_sum;
  }
}

// The plan: pl.tiles == 0 where the tiled kernel does not serve g (or the
// batch is empty).
struct TiledWgradPlan {
  GpTiledWgradParams d{};
  int64_t ctas_per_slice = 0;
  size_t partial_bytes = 0, bias_bytes = 0, smem = 0;
};

TiledWgradPlan PlanOf(const ConvGeometry& g, bool bias) {
  TiledWgradPlan w;
  GpTiledWgradParams& d = w.d;
  d.s = GpGeometryOf(g, nullptr);
  d.out_channels = int(g.out_channels);
  d.cout_g = int(g.cout_g());
  d.nt = d.cout_g / 8;
  d.pl.slice_groups = GpSliceGroups(g);
  d.units = d.pl.slice_groups * (d.s.chunks_even / 2);
  if (GpInputDilated(g) || d.units > kUnits * kGpTiledWarps) return w;
  // The parts that do not scale with the tile, and those that do.
  const WgradLayout fixed = WgradLayoutOf(d);
  const size_t per_position = size_t(fixed.dline) * 16 + 4;
  d.pl = GpPlanPatch(g, fixed.total, per_position);
  if (!d.pl.fits || d.pl.tiles == 0) return w;
  const int64_t slices = g.groups / d.pl.slice_groups;
  w.ctas_per_slice = std::min<int64_t>({d.pl.tiles, std::max<int64_t>(1, kTiledWgradCtas / slices), 65535});
  const int64_t wk = g.taps() * g.cin_g();
  w.partial_bytes = sm90::RoundUp(size_t(g.groups * w.ctas_per_slice * wk * g.cout_g()) * 4);
  w.bias_bytes = bias ? sm90::RoundUp(size_t(g.groups * w.ctas_per_slice * g.cout_g()) * 4) : 0;
  w.smem = WgradLayoutOf(d).total;
  return w;
}

template <typename T, int kNT>
LaunchStatus LaunchNt(const TiledWgradPlan& w, int64_t slices, cudaStream_t stream) {
  auto kernel = GroupedTiledWgradKernel<T, kNT>;
  // One opt-in value for every geometry (grouped_tiled_fwd.cu says why).
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kGpTiledSmemBudget));
  if (e != cudaSuccess) return e;
  kernel<<<dim3(unsigned(slices), unsigned(w.ctas_per_slice)), kGpTiledWarps * 32, w.smem, stream>>>(w.d);
  return cudaGetLastError();
}

}  // namespace

// Whether it serves does not depend on the batch (the plan queries ask at
// batch 1; an empty batch only zeroes dw).
bool GroupedTiledWgradServes(const ConvWgradArgs& p) {
  ConvGeometry g = p.g;
  g.batch = std::max<int64_t>(g.batch, 1);
  return PlanOf(g, p.e.has_bias).d.pl.fits;
}

size_t GroupedTiledWgradWorkspace(const ConvWgradArgs& p) {
  const TiledWgradPlan w = PlanOf(p.g, p.e.has_bias);
  return w.partial_bytes + w.bias_bytes;
}

LaunchStatus GroupedTiledWgradCuda(const ConvWgradArgs& p, cudaStream_t stream) {
  if (p.g.batch == 0) {
    // No positions: dw and the bias gradient are zeros.
    cudaError_t e = cudaMemsetAsync(p.dw, 0, size_t(p.g.weights()) * 2, stream);
    if (e == cudaSuccess && p.e.has_bias)
      e = cudaMemsetAsync(p.dbias, 0, size_t(p.g.out_channels) * (p.bias_dtype == ffi::DataType::F32 ? 4 : 2),
                          stream);
    return e;
  }
  TiledWgradPlan w = PlanOf(p.g, p.e.has_bias);
  if (w.d.pl.tiles == 0)
    return LaunchStatus::Refused("grouped_wgrad: the tiled kernel does not serve this geometry");
  if (p.workspace == nullptr || p.workspace_bytes < w.partial_bytes + w.bias_bytes)
    return LaunchStatus::Refused("grouped_wgrad: workspace smaller than GroupedWgradWorkspace");
  char* ws = static_cast<char*>(p.workspace);
  w.d.s.src = p.x;
  w.d.dz = p.dy;
  w.d.partials = reinterpret_cast<float*>(ws);
  w.d.bias_partials = p.e.has_bias ? reinterpret_cast<float*>(ws + w.partial_bytes) : nullptr;
  const int64_t slices = p.g.groups / w.d.pl.slice_groups;
  const bool bf16 = p.dtype == ffi::DataType::BF16;
  LaunchStatus s;
  if (w.d.nt == 1)
    s = bf16 ? LaunchNt<__nv_bfloat16, 1>(w, slices, stream) : LaunchNt<__half, 1>(w, slices, stream);
  else if (w.d.nt == 2)
    s = bf16 ? LaunchNt<__nv_bfloat16, 2>(w, slices, stream) : LaunchNt<__half, 2>(w, slices, stream);
  else
    s = bf16 ? LaunchNt<__nv_bfloat16, 4>(w, slices, stream) : LaunchNt<__half, 4>(w, slices, stream);
  if (!s.ok()) return s;
  return LaunchGroupedWgradReduce(p, w.d.partials, w.d.bias_partials, w.ctas_per_slice, stream);
}

}  // namespace jaxdnn::conv
