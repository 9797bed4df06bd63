// The tiled grouped forward (grouped_fwd.h): a CTA a channel slice, walking
// tiles of output positions. Per tile: the input window staged once
// (grouped_patch.cuh); each warp multiplies one group's pair of 16-position
// mma tiles, its A fragments read by ldmatrix straight from the patch (each
// lane names its own pixel, so the im2col gather costs nothing); the float32
// sums staged in shared memory; then the whole CTA runs the epilogue in
// 16-byte channel vectors while the next tile's patch loads.
#include <algorithm>
#include <cstdint>

#include "conv/sm80/depthwise_common.cuh"
#include "conv/sm80/grouped_fwd.h"
#include "conv/sm80/grouped_patch.cuh"

namespace jaxdnn::conv {
namespace {

struct GpTiledFwdParams {
  GpGeometry s;  // x's side (s.src: x)
  GpPatchPlan pl;
  const void* w;  // [taps * cin_g, C_out]
  const void* bias;
  const void* residual;
  void* y;
  void* z;
  int out_channels, cout_g, nt;
  int group_runs, run_groups;  // a tile's items: m pairs x runs of run_groups groups
  int bias_dtype, act;
  float act_param, alpha, beta;
};

// Shared memory, in this order (16-byte units; every part a whole number):
// the patch; the slice's window rows [chunks_even * 8][wline] (k rows, its
// output channels, zero rows past the window, wline odd against bank
// conflicts); each K chunk's offset into a pixel's window; each position's
// window corner; the bias; the float32 sums [positions][out_slice + 4].
struct TiledLayout {
  int out_slice, vecs, wline, pitch;
  size_t patch, wrows, koff, qbase, bias, stage, total;
};

__host__ __device__ inline TiledLayout LayoutOf(const GpTiledFwdParams& p) {
  TiledLayout l;
  l.out_slice = p.pl.slice_groups * p.cout_g;
  l.vecs = l.out_slice / 8;
  l.wline = l.vecs % 2 == 1 ? l.vecs : l.vecs + 1;
  l.pitch = l.out_slice + 4;
  const int rows = p.pl.m_pairs * 2 * kGpRows;
  l.patch = 0;
  l.wrows = l.patch + p.pl.patch_bytes() / 16;
  l.koff = l.wrows + size_t(p.s.chunks_even) * 8 * l.wline;
  l.qbase = l.koff + (p.s.chunks_even + 3) / 4;
  l.bias = l.qbase + rows / 4;
  l.stage = l.bias + (l.out_slice + 3) / 4;
  l.total = (l.stage + size_t(rows) * l.pitch / 4) * 16;
  return l;
}

// y (and z) of a tile from its float32 sums, 8 channels a thread at a time.
template <Act A, typename OT>
__device__ __forceinline__ void FinishTile(const GpTiledFwdParams& p, const TiledLayout& l, const GpTile& t,
                                           int slice, const float* stage, const float* bias) {
  const GpPatchPlan& pl = p.pl;
  const int total = pl.positions() * l.vecs;
  const int vecs_log2 = (l.vecs & (l.vecs - 1)) == 0 ? __ffs(l.vecs) - 1 : -1;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int q = vecs_log2 >= 0 ? i >> vecs_log2 : i / l.vecs, v = i - q * l.vecs;
    const int tr = q / pl.tile_cols, tc = q - tr * pl.tile_cols;
    const int oh = t.oh0 + tr, ow = t.ow0 + tc;
    if (oh >= p.s.out(1) || ow >= p.s.out(2)) continue;
    const int64_t row = ((t.n * p.s.out(0) + t.od) * p.s.out(1) + oh) * int64_t(p.s.out(2)) + ow;
    const int64_t at = row * p.out_channels + int64_t(slice) * l.out_slice + v * 8;
    const float4* s = reinterpret_cast<const float4*>(stage + q * l.pitch + v * 8);
    const float4 s0 = s[0], s1 = s[1];
    float f[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] *= p.alpha;
    if (p.bias != nullptr) {
      const float4* b = reinterpret_cast<const float4*>(bias + v * 8);
      const float4 b0 = b[0], b1 = b[1];
      const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] += bv[e];
    }
    if (p.residual != nullptr) {
      float r[8];
      LoadOut<OT, 8>(static_cast<const OT*>(p.residual) + at, r);
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] += p.beta * r[e];
    }
    if (p.z != nullptr) StoreOut<OT, 8>(static_cast<OT*>(p.z) + at, f);
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = Apply<A>(f[e], p.act_param);
    StoreOut<OT, 8>(static_cast<OT*>(p.y) + at, f);
  }
}

template <typename OT>
__device__ void FinishTileAct(const GpTiledFwdParams& p, const TiledLayout& l, const GpTile& t, int slice,
                              const float* stage, const float* bias) {
  // (The forward's refusal admits only known codes, so ByAct always runs one.)
  ByAct(p.act, [&](auto a) { FinishTile<decltype(a)::value, OT>(p, l, t, slice, stage, bias); });
}

// One group's sums over a pair of 16-position m tiles, into the float32
// stage: kNT n tiles (a template, so the accumulators, the mma's and the
// stores are those the group has, not the widest's predicated off).
template <typename T, int kNT>
__device__ __forceinline__ void MultiplyGroup(const GpTiledFwdParams& p, const TiledLayout& l,
                                              const uint4* patch, const uint4* wrows, const int* koff, int a0,
                                              int a1, int brow, int gl, int mp, float* stage) {
  const int lane = threadIdx.x & 31, gcol = gl << p.s.cpt_log2;
  const uint4* b = wrows + brow + gl * p.nt;
  float acc[2][kNT][4] = {};
  for (int c = 0; c < p.s.chunks_even; c += 2, b += 16 * l.wline) {
    // Matrices (rows 0-7 | 8-15) x (chunk c | c + 1): the A fragments; past
    // an odd chunk count, the pad chunk's zeros.
    const int kc = c + (lane >> 4);
    const int off = kc < p.s.chunks ? koff[kc] + gcol : p.pl.cpp;
    uint32_t a[2][4];
    sm80::LdMatrixX4(a[0], patch + a0 + off);
    sm80::LdMatrixX4(a[1], patch + a1 + off);
#pragma unroll
    for (int j = 0; j < kNT; j += 2) {
      if (j + 1 < kNT && j + 1 < p.nt) {
        uint32_t bf[4];
        sm80::LdMatrixX4Trans(bf, b + j);
        sm80::MmaOp<T>::Run(acc[0][j], a[0], bf[0], bf[1]);
        sm80::MmaOp<T>::Run(acc[1][j], a[1], bf[0], bf[1]);
        sm80::MmaOp<T>::Run(acc[0][j + 1], a[0], bf[2], bf[3]);
        sm80::MmaOp<T>::Run(acc[1][j + 1], a[1], bf[2], bf[3]);
      } else if (j < p.nt) {
        uint32_t bf[2];
        sm80::LdMatrixX2Trans(bf, b + j);
        sm80::MmaOp<T>::Run(acc[0][j], a[0], bf[0], bf[1]);
        sm80::MmaOp<T>::Run(acc[1][j], a[1], bf[0], bf[1]);
      }
    }
  }
  const int gid = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    float* row = stage + ((2 * mp + m) * kGpRows + gid) * l.pitch + gl * p.cout_g + tig * 2;
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      if (j < p.nt) {
        *reinterpret_cast<float2*>(row + j * 8) = make_float2(acc[m][j][0], acc[m][j][1]);
        *reinterpret_cast<float2*>(row + 8 * l.pitch + j * 8) = make_float2(acc[m][j][2], acc[m][j][3]);
      }
    }
  }
}

template <typename T, typename OT>
__global__ void __launch_bounds__(kGpTiledWarps * 32, 3) GroupedTiledFwdKernel(GpTiledFwdParams p) {
  extern __shared__ uint4 smem[];
  const GpPatchPlan& pl = p.pl;
  const TiledLayout l = LayoutOf(p);
  uint4* patch = smem + l.patch;
  uint4* wrows = smem + l.wrows;
  int* koff = reinterpret_cast<int*>(smem + l.koff);
  int* qbase = reinterpret_cast<int*>(smem + l.qbase);
  float* bias = reinterpret_cast<float*>(smem + l.bias);
  float* stage = reinterpret_cast<float*>(smem + l.stage);
  const int slice = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int cpt = 1 << p.s.cpt_log2;

  // The slice's window rows (zeros past the window), by 16-byte copies.
  {
    const int rows = p.s.chunks_even * 8, real = p.s.chunks * 8;
    const T* w = static_cast<const T*>(p.w) + int64_t(slice) * l.out_slice;
    for (int i = threadIdx.x; i < rows * l.vecs; i += blockDim.x) {
      const int r = i / l.vecs, v = i - r * l.vecs;
      CpAsync16(wrows + r * l.wline + v, w + int64_t(r < real ? r : 0) * p.out_channels + v * 8,
                r < real ? 16 : 0);
    }
  }
  // Each K chunk's offset from a window corner; a position's window corner
  // (dead positions read pixel 0: their rows are never stored); the pad
  // chunks' zeros; the bias as float32.
  GpFillChunkOffsets(pl, p.s, koff);
  for (int q = threadIdx.x; q < pl.m_pairs * 2 * kGpRows; q += blockDim.x) {
    const int tr = q / pl.tile_cols, tc = q - tr * pl.tile_cols;
    qbase[q] = q < pl.positions() ? (tr * p.s.stride[1] * pl.patch[2] + tc * p.s.stride[2]) * pl.line : 0;
  }
  GpZeroPads(pl, patch);
  if (p.bias != nullptr)
    for (int c = threadIdx.x; c < l.out_slice; c += blockDim.x)
      bias[c] = BiasAt(p.bias, p.bias_dtype, int64_t(slice) * l.out_slice + c);

  const T* x = static_cast<const T*>(p.s.src);
  int64_t tile = blockIdx.y;

  const int items = p.group_runs * pl.m_pairs;
  // This lane's ldmatrix rows: A (positions) and B (window rows k).
  const int arow = (lane & 7) + 8 * ((lane >> 3) & 1);
  const int brow = arow * l.wline + (lane >> 4);
  GpTile t = GpTileAt(pl, p.s.out(0), tile);
  if (tile < pl.tiles) GpStagePatch(pl, p.s, x, slice, t, patch);
  CpAsyncCommit();
  for (; tile < pl.tiles; tile += gridDim.y) {
    CpAsyncWaitAll();
    __syncthreads();

    // An item: one m pair (its lanes' window corners read once) and a run
    // of the slice's groups, so a tile has about as many items as warps.
    for (int item = warp; item < items; item += kGpTiledWarps) {
      const int run = item / pl.m_pairs, mp = item - run * pl.m_pairs;
      const int a0 = qbase[2 * mp * kGpRows + arow], a1 = qbase[(2 * mp + 1) * kGpRows + arow];
      const int g_end = min(pl.slice_groups, (run + 1) * p.run_groups);
      for (int gl = run * p.run_groups; gl < g_end; ++gl) {
        if (p.nt == 1)
          MultiplyGroup<T, 1>(p, l, patch, wrows, koff, a0, a1, brow, gl, mp, stage);
        else if (p.nt == 2)
          MultiplyGroup<T, 2>(p, l, patch, wrows, koff, a0, a1, brow, gl, mp, stage);
        else
          MultiplyGroup<T, 4>(p, l, patch, wrows, koff, a0, a1, brow, gl, mp, stage);
      }
    }
    __syncthreads();

    // The patch is free: the next tile's loads run under this epilogue.
    const GpTile now = t;
    if (tile + gridDim.y < pl.tiles) {
      t = GpTileAt(pl, p.s.out(0), tile + gridDim.y);
      GpStagePatch(pl, p.s, x, slice, t, patch);
    }
    CpAsyncCommit();
    FinishTileAct<OT>(p, l, now, slice, stage, bias);
    __syncthreads();
  }
}

// The plan (pl.fits == false: the tiled kernel does not serve g).
GpTiledFwdParams PlanOf(const ConvGeometry& g) {
  GpTiledFwdParams d{};
  d.s = GpGeometryOf(g, nullptr);
  d.out_channels = int(g.out_channels);
  d.cout_g = int(g.cout_g());
  d.nt = d.cout_g / 8;
  // The layout's parts that do not scale with the tile, and those that do.
  d.pl.slice_groups = GpSliceGroups(g);
  d.pl.m_pairs = 0;
  const TiledLayout fixed = LayoutOf(d);
  const size_t per_position = size_t(fixed.pitch) * 4 + 4;
  d.pl = GpPlanPatch(g, fixed.total, per_position);
  if (d.pl.fits) {
    // Runs of a power-of-two count of groups dividing the slice, the one
    // whose busiest warp multiplies the fewest groups (ties: longer runs).
    int best = 0, best_load = 0;
    for (int rg = d.pl.slice_groups; rg >= 1; rg /= 2) {
      const int items = (d.pl.slice_groups / rg) * d.pl.m_pairs;
      const int load = (items + kGpTiledWarps - 1) / kGpTiledWarps * rg;
      if (best == 0 || load < best_load) best = rg, best_load = load;
    }
    d.run_groups = best;
    d.group_runs = d.pl.slice_groups / best;
  }
  return d;
}

template <typename T, typename OT>
LaunchStatus Launch(const GpTiledFwdParams& d, int64_t groups, cudaStream_t stream) {
  const TiledLayout l = LayoutOf(d);
  const size_t smem = l.total;
  auto kernel = GroupedTiledFwdKernel<T, OT>;
  // The opt-in is the budget every plan fits, not this launch's size: one
  // value, so host threads launching other geometries cannot lower it under
  // this launch (a function attribute, not a stream operation:
  // capture-safe).
  {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kGpTiledSmemBudget));
    if (err != cudaSuccess) return err;
  }
  int dev = 0, sms = 0, per_sm = 0;
  cudaError_t e;
  if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
  if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kGpTiledWarps * 32, smem)) !=
      cudaSuccess)
    return e;
  const int64_t slices = groups / d.pl.slice_groups;
  // Persistent CTAs, each CTA's next patch loading under its epilogue: two
  // waves, or one where the window's rows (staged once a CTA) outweigh a
  // tile's patch (32 channels a group: 7x7x1024 read 41 KB of rows for
  // three 12 KB patches).
  const bool heavy = (l.koff - l.wrows) * 16 > d.pl.patch_bytes();
  const int64_t ctas = int64_t(sms) * std::max(per_sm, 1) * (heavy ? 1 : 2);
  const int64_t grid_y = std::min<int64_t>({d.pl.tiles, std::max<int64_t>(1, ctas / slices), 65535});
  kernel<<<dim3(unsigned(slices), unsigned(grid_y)), kGpTiledWarps * 32, smem, stream>>>(d);
  return cudaGetLastError();
}

}  // namespace

bool GroupedTiledFwdServes(const ConvFwdArgs& p) {
  if (GpInputDilated(p.g)) return false;
  return PlanOf(p.g).pl.fits;
}

LaunchStatus GroupedTiledFwdCuda(const ConvFwdArgs& p, cudaStream_t stream) {
  GpTiledFwdParams d = PlanOf(p.g);
  if (GpInputDilated(p.g) || !d.pl.fits)
    return LaunchStatus::Refused("grouped_fwd: the tiled kernel does not serve this geometry");
  if (d.pl.tiles == 0) return cudaSuccess;
  d.s.src = p.x;
  d.w = p.w;
  d.bias = p.e.has_bias ? p.bias : nullptr;
  d.residual = p.e.has_residual ? p.residual : nullptr;
  d.y = p.y;
  d.z = p.e.saved == kSavePreact ? p.z : nullptr;
  d.bias_dtype = static_cast<int>(p.bias_dtype);
  d.act = p.e.act;
  d.act_param = p.e.act_param;
  d.alpha = p.e.alpha;
  d.beta = p.e.beta;
  const bool wide = p.out_dtype == ffi::DataType::F32;
  if (p.dtype == ffi::DataType::BF16)
    return wide ? Launch<__nv_bfloat16, float>(d, p.g.groups, stream)
                : Launch<__nv_bfloat16, __nv_bfloat16>(d, p.g.groups, stream);
  return wide ? Launch<__half, float>(d, p.g.groups, stream) : Launch<__half, __half>(d, p.g.groups, stream);
}

}  // namespace jaxdnn::conv
