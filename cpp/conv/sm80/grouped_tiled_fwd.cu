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
  GpDims d;
  GpPatchPlan pl;
  const void* x;
  const void* w;  // [taps * cin_g, C_out]
  const void* bias;
  const void* residual;
  void* y;
  void* z;
  int out_channels, cin_g, cpt_log2, cout_g, nt, taps, chunks, chunks_even;
  int bias_dtype, act;
  float act_param, alpha, beta;
};

// The slice's output channels, and the float32 staging's row pitch (4
// floats of padding spread the rows over the banks).
inline int OutSlice(const GpTiledFwdParams& p) { return p.pl.slice_groups * p.cout_g; }
__host__ __device__ inline int StagePitch(int out_slice) { return out_slice + 4; }

__host__ __device__ inline size_t WeightBytes(int slice_groups, int chunks_even, int nt) {
  return size_t(slice_groups) * chunks_even * nt * 32 * 4;
}
__host__ __device__ inline size_t TapBytes(int taps) { return size_t((taps + 3) / 4) * 16; }

template <typename T, typename OT>
__global__ void __launch_bounds__(kGpTiledWarps * 32) GroupedTiledFwdKernel(GpTiledFwdParams p) {
  extern __shared__ uint4 smem[];
  const GpPatchPlan& pl = p.pl;
  uint4* patch = smem;
  const int zero_chunk = pl.pixels() << pl.cpp_log2;
  int* tapoff = reinterpret_cast<int*>(smem + zero_chunk + 1);
  uint32_t* words = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(tapoff) + TapBytes(p.taps));
  float* stage =
      reinterpret_cast<float*>(reinterpret_cast<char*>(words) + WeightBytes(pl.slice_groups, p.chunks_even, p.nt));
  const int out_slice = pl.slice_groups * p.cout_g, pitch = StagePitch(out_slice);
  const int slice = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  // Each tap's offset in patch pixels; the zero chunk (odd chunk counts,
  // dead rows); the slice's windows as B fragments: word (g, c, nt, lane)
  // holds W[k][n], W[k + 1][n] of group g for k = 8c + 2 (lane % 4),
  // n = 8 nt + lane / 4.
  for (int t = threadIdx.x; t < p.taps; t += blockDim.x) {
    const int kw = t % p.d.window[2], kh = (t / p.d.window[2]) % p.d.window[1],
              kd = t / (p.d.window[2] * p.d.window[1]);
    tapoff[t] = (kd * p.d.k_dil[0] * pl.patch[1] + kh * p.d.k_dil[1]) * pl.patch[2] + kw * p.d.k_dil[2];
  }
  if (threadIdx.x == 0) patch[zero_chunk] = make_uint4(0, 0, 0, 0);
  const uint16_t* w = static_cast<const uint16_t*>(p.w);
  const int nwords = pl.slice_groups * p.chunks_even * p.nt * 32;
  for (int i = threadIdx.x; i < nwords; i += blockDim.x) {
    const int l = i & 31, nt = (i >> 5) % p.nt, gc = (i >> 5) / p.nt;
    const int c = gc % p.chunks_even, gl = gc / p.chunks_even;
    uint32_t word = 0;
    if (c < p.chunks) {
      const int64_t k = int64_t(c) * 8 + (l & 3) * 2;
      const int64_t n = int64_t(slice * pl.slice_groups + gl) * p.cout_g + nt * 8 + (l >> 2);
      word = uint32_t(w[k * p.out_channels + n]) | (uint32_t(w[(k + 1) * p.out_channels + n]) << 16);
    }
    words[i] = word;
  }

  const T* x = static_cast<const T*>(p.x);
  int64_t tile = blockIdx.y;
  if (tile < pl.tiles) GpStagePatch(pl, p.d, x, slice, GpTileAt(pl, p.d.out[0], tile), patch);
  CpAsyncCommit();

  const int gid = lane >> 2, tig = lane & 3, cpt = 1 << p.cpt_log2;
  const int items = pl.slice_groups * pl.m_pairs;
  for (; tile < pl.tiles; tile += gridDim.y) {
    const GpTile t = GpTileAt(pl, p.d.out[0], tile);
    CpAsyncWaitAll();
    __syncthreads();

    for (int item = warp; item < items; item += kGpTiledWarps) {
      const int gl = item / pl.m_pairs, mp = item - gl * pl.m_pairs;
      // This lane's ldmatrix row in each of the two m tiles: its position's
      // window corner in the patch, or -1 (past the tile or the output).
      int base[2];
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const int q = (2 * mp + m) * kGpRows + (lane & 7) + 8 * ((lane >> 3) & 1);
        const int tr = q / pl.tile_cols, tc = q - tr * pl.tile_cols;
        const bool live = tr < pl.tile_rows && t.oh0 + tr < p.d.out[1] && t.ow0 + tc < p.d.out[2];
        base[m] = live ? tr * p.d.stride[1] * pl.patch[2] + tc * p.d.stride[2] : -1;
      }
      float acc[2][kGpMaxNt][4] = {};
      const uint32_t* b = words + gl * p.chunks_even * p.nt * 32 + lane;
      for (int c = 0; c < p.chunks_even; c += 2) {
        // Matrices (rows 0-7 | 8-15) x (chunk c | c + 1): the A fragment.
        const int kc = c + (lane >> 4);
        const bool kin = kc < p.chunks;
        const int off = kin ? tapoff[kc >> p.cpt_log2] : 0;
        const int ch = gl * cpt + (kc & (cpt - 1));
        uint32_t a[2][4];
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          const int pix = base[m] + off;
          const int at = (kin && base[m] >= 0) ? GpPatchChunk(pl, pix, ch) : zero_chunk;
          sm80::LdMatrixX4(a[m], patch + at);
        }
#pragma unroll
        for (int nt = 0; nt < kGpMaxNt; ++nt) {
          if (nt < p.nt) {
            const uint32_t b0 = b[(c * p.nt + nt) * 32], b1 = b[((c + 1) * p.nt + nt) * 32];
            sm80::MmaOp<T>::Run(acc[0][nt], a[0], b0, b1);
            sm80::MmaOp<T>::Run(acc[1][nt], a[1], b0, b1);
          }
        }
      }
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const int q = (2 * mp + m) * kGpRows + gid;
#pragma unroll
        for (int nt = 0; nt < kGpMaxNt; ++nt) {
          if (nt < p.nt) {
            const int col = gl * p.cout_g + nt * 8 + tig * 2;
            *reinterpret_cast<float2*>(stage + q * pitch + col) = make_float2(acc[m][nt][0], acc[m][nt][1]);
            *reinterpret_cast<float2*>(stage + (q + 8) * pitch + col) =
                make_float2(acc[m][nt][2], acc[m][nt][3]);
          }
        }
      }
    }
    __syncthreads();

    // The patch is free: the next tile's loads run under this epilogue.
    if (tile + gridDim.y < pl.tiles)
      GpStagePatch(pl, p.d, x, slice, GpTileAt(pl, p.d.out[0], tile + gridDim.y), patch);
    CpAsyncCommit();

    const int vecs = out_slice / 8, total = pl.positions() * vecs;
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
      const int q = i / vecs, v = i - q * vecs;
      const int tr = q / pl.tile_cols, tc = q - tr * pl.tile_cols;
      const int oh = t.oh0 + tr, ow = t.ow0 + tc;
      if (oh >= p.d.out[1] || ow >= p.d.out[2]) continue;
      const int64_t row = ((t.n * p.d.out[0] + t.od) * p.d.out[1] + oh) * int64_t(p.d.out[2]) + ow;
      const int64_t col = int64_t(slice) * out_slice + v * 8;
      const int64_t at = row * p.out_channels + col;
      const float* s = stage + q * pitch + v * 8;
      float res[8];
      if (p.residual != nullptr) LoadOut<OT, 8>(static_cast<const OT*>(p.residual) + at, res);
      float zf[8], yf[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float val = p.alpha * s[e];
        if (p.bias != nullptr) val += BiasAt(p.bias, p.bias_dtype, col + e);
        if (p.residual != nullptr) val += p.beta * res[e];
        zf[e] = val;
        yf[e] = ApplyAct(p.act, val, p.act_param);
      }
      StoreOut<OT, 8>(static_cast<OT*>(p.y) + at, yf);
      if (p.z != nullptr) StoreOut<OT, 8>(static_cast<OT*>(p.z) + at, zf);
    }
    __syncthreads();
  }
}

// The plan (tiles == 0: the tiled kernel does not serve g).
GpTiledFwdParams PlanOf(const ConvGeometry& g) {
  GpTiledFwdParams d{};
  d.d = GpDimsOf(g);
  d.out_channels = int(g.out_channels);
  d.cin_g = int(g.cin_g());
  d.cpt_log2 = Log2Exact(d.cin_g / 8);
  d.cout_g = int(g.cout_g());
  d.nt = d.cout_g / 8;
  d.taps = int(g.taps());
  d.chunks = int(g.taps() * (g.cin_g() / 8));
  d.chunks_even = int(GpChunksEven(g));
  const int slice_groups = GpSliceGroups(g);
  const size_t fixed = TapBytes(d.taps) + WeightBytes(slice_groups, d.chunks_even, d.nt);
  const size_t per_position = size_t(StagePitch(slice_groups * d.cout_g)) * 4;
  d.pl = GpPlanPatch(g, fixed, per_position);
  return d;
}

size_t SmemOf(const GpTiledFwdParams& d) {
  return d.pl.patch_bytes() + TapBytes(d.taps) + WeightBytes(d.pl.slice_groups, d.chunks_even, d.nt) +
         size_t(d.pl.m_pairs) * 2 * kGpRows * StagePitch(OutSlice(d)) * 4;
}

template <typename T, typename OT>
LaunchStatus Launch(const GpTiledFwdParams& d, int64_t groups, cudaStream_t stream) {
  const size_t smem = SmemOf(d);
  auto kernel = GroupedTiledFwdKernel<T, OT>;
  // Over 48 KiB of dynamic shared memory needs the kernel's opt-in (a
  // function attribute, not a stream operation: capture-safe).
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  const int64_t slices = groups / d.pl.slice_groups;
  // A few waves of persistent CTAs a slice: the window's weights staged once
  // a CTA, each CTA's next patch loading under its epilogue.
  const int64_t grid_y = std::min<int64_t>({d.pl.tiles, std::max<int64_t>(1, 1024 / slices), 65535});
  kernel<<<dim3(unsigned(slices), unsigned(grid_y)), kGpTiledWarps * 32, smem, stream>>>(d);
  return cudaGetLastError();
}

}  // namespace

bool GroupedTiledFwdServes(const ConvFwdArgs& p) {
  if (GpInputDilated(p.g)) return false;
  return PlanOf(p.g).pl.tiles > 0;
}

LaunchStatus GroupedTiledFwdCuda(const ConvFwdArgs& p, cudaStream_t stream) {
  GpTiledFwdParams d = PlanOf(p.g);
  if (GpInputDilated(p.g) || d.pl.tiles == 0)
    return LaunchStatus::Refused("grouped_fwd: the tiled kernel does not serve this geometry");
  d.x = p.x;
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
