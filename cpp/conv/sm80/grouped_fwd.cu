// The grouped forward (grouped_fwd.h): a CTA a group, its window staged as
// mma B fragments in shared memory once; each warp walks 16-position tiles,
// staging up to kGpBatch chunks of their window rows at a time.
#include "conv/sm80/grouped_fwd.h"

#include <algorithm>
#include <cstdint>

#include "conv/sm80/depthwise_common.cuh"
#include "conv/sm80/grouped_common.cuh"

namespace jaxdnn::conv {
namespace {

constexpr int kGpBatch = 16;  // chunks a warp stages at a time (even)

struct GpFwdParams {
  GpGeometry s;
  const void* w;  // [taps * cin_g, C_out]
  const void* bias;
  const void* residual;
  void* y;
  void* z;
  int64_t out_channels;
  int out_group;  // C_out / groups
  int nt;         // out_group / 8
  int bias_dtype, act;
  float act_param, alpha, beta;
};

// Shared memory: the warps' two stages, the tap table, the window's B words.
inline size_t FwdSmem(int64_t taps, int64_t chunks_even, int64_t nt) {
  return size_t(kGpWarps) * 2 * kGpBatch * kGpRows * 16 + size_t(taps) * 16 +
         size_t(chunks_even) * nt * 32 * 4;
}

template <typename OT>
__device__ __forceinline__ void Store2(OT* dst, float a, float b);
template <>
__device__ __forceinline__ void Store2<float>(float* dst, float a, float b) {
  *reinterpret_cast<float2*>(dst) = make_float2(a, b);
}
template <>
__device__ __forceinline__ void Store2<__nv_bfloat16>(__nv_bfloat16* dst, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
}
template <>
__device__ __forceinline__ void Store2<__half>(__half* dst, float a, float b) {
  *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(a, b);
}

template <typename OT>
__device__ __forceinline__ float2 Load2(const OT* src);
template <>
__device__ __forceinline__ float2 Load2<float>(const float* src) {
  return *reinterpret_cast<const float2*>(src);
}
template <>
__device__ __forceinline__ float2 Load2<__nv_bfloat16>(const __nv_bfloat16* src) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src));
}
template <>
__device__ __forceinline__ float2 Load2<__half>(const __half* src) {
  return __half22float2(*reinterpret_cast<const __half2*>(src));
}

// Two neighbouring outputs of one row: the epilogue, y (and z) stored.
template <typename OT>
__device__ __forceinline__ void Finish2(const GpFwdParams& p, int64_t row, int64_t col, float a, float b) {
  const int64_t at = row * p.out_channels + col;
  float v0 = p.alpha * a, v1 = p.alpha * b;
  if (p.bias != nullptr) {
    v0 += BiasAt(p.bias, p.bias_dtype, col);
    v1 += BiasAt(p.bias, p.bias_dtype, col + 1);
  }
  if (p.residual != nullptr) {
    const float2 r = Load2<OT>(static_cast<const OT*>(p.residual) + at);
    v0 += p.beta * r.x;
    v1 += p.beta * r.y;
  }
  if (p.z != nullptr) Store2<OT>(static_cast<OT*>(p.z) + at, v0, v1);
  Store2<OT>(static_cast<OT*>(p.y) + at, ApplyCode(p.act, v0, p.act_param),
             ApplyCode(p.act, v1, p.act_param));
}

template <typename T, typename OT, bool kInDil>
__global__ void __launch_bounds__(kGpWarps * 32) GroupedFwdKernel(GpFwdParams p) {
  extern __shared__ uint4 smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint4* stages = smem + warp * 2 * kGpBatch * kGpRows;
  int4* taps = reinterpret_cast<int4*>(smem + kGpWarps * 2 * kGpBatch * kGpRows);
  uint32_t* words = reinterpret_cast<uint32_t*>(taps + p.s.taps);
  const int group = blockIdx.x;

  // The group's window as B fragments: word (c, nt, lane) holds
  // W[k][n], W[k + 1][n] for k = 8c + 2 (lane % 4), n = 8 nt + lane / 4.
  FillTapTable(p.s, taps);
  const uint16_t* w = static_cast<const uint16_t*>(p.w);
  const int nwords = p.s.chunks_even * p.nt * 32;
  for (int i = threadIdx.x; i < nwords; i += blockDim.x) {
    const int l = i & 31, nt = (i >> 5) % p.nt, c = (i >> 5) / p.nt;
    uint32_t word = 0;
    if (c < p.s.chunks) {
      const int64_t k = int64_t(c) * 8 + (l & 3) * 2;
      const int64_t n = int64_t(group) * p.out_group + nt * 8 + (l >> 2);
      word = uint32_t(w[k * p.out_channels + n]) | (uint32_t(w[(k + 1) * p.out_channels + n]) << 16);
    }
    words[i] = word;
  }
  __syncthreads();

  const int row = lane & 15, half = lane >> 4, gid = lane >> 2, tig = lane & 3;
  const int64_t tiles = (p.s.rows + kGpRows - 1) / kGpRows;
  const int64_t step = int64_t(gridDim.y) * kGpWarps;
  // Chunks [c0, c0 + nb) of the tile's rows into `stage`.
  auto issue = [&](int64_t tile, int c0, int nb, uint4* stage) {
    const GpRow<T> r = DecodeRow<T>(p.s, group, tile * kGpRows + row);
    for (int c = half; c < nb; c += 2) StageChunk<kInDil>(p.s, taps, r, c0 + c, stage + c * kGpRows + row);
  };
  // The mma's over staged chunks [0, nb) (window chunks c0 + ...).
  auto multiply = [&](float (&acc)[kGpMaxNt][4], int c0, int nb, const uint4* stage) {
    for (int c = 0; c < nb; c += 2) {
      // Matrices (rows 0-7 | 8-15) x (chunk c | c + 1): the A fragment.
      const int m = lane >> 3;
      uint32_t a[4];
      sm80::LdMatrixX4(a, stage + (c + (m >> 1)) * kGpRows + (lane & 7) + 8 * (m & 1));
      const uint32_t* b = words + (c0 + c) * p.nt * 32 + lane;
#pragma unroll
      for (int nt = 0; nt < kGpMaxNt; ++nt)
        if (nt < p.nt) sm80::MmaOp<T>::Run(acc[nt], a, b[nt * 32], b[(p.nt + nt) * 32]);
    }
  };
  auto finish = [&](const float (&acc)[kGpMaxNt][4], int64_t tile) {
    const int64_t row0 = tile * kGpRows + gid;
#pragma unroll
    for (int nt = 0; nt < kGpMaxNt; ++nt) {
      if (nt >= p.nt) break;
      const int64_t col = int64_t(group) * p.out_group + nt * 8 + tig * 2;
      if (row0 < p.s.rows) Finish2<OT>(p, row0, col, acc[nt][0], acc[nt][1]);
      if (row0 + 8 < p.s.rows) Finish2<OT>(p, row0 + 8, col, acc[nt][2], acc[nt][3]);
    }
  };

  int64_t tile = int64_t(blockIdx.y) * kGpWarps + warp;
  if (p.s.chunks_even <= kGpBatch) {
    // One stage a tile: the next tile's rows load while this one multiplies.
    int buf = 0;
    if (tile < tiles) issue(tile, 0, p.s.chunks_even, stages);
    CpAsyncCommit();
    for (; tile < tiles; tile += step, buf ^= 1) {
      if (tile + step < tiles)
        issue(tile + step, 0, p.s.chunks_even, stages + (buf ^ 1) * kGpBatch * kGpRows);
      CpAsyncCommit();
      CpAsyncWait<1>();
      __syncwarp();
      float acc[kGpMaxNt][4] = {};
      multiply(acc, 0, p.s.chunks_even, stages + buf * kGpBatch * kGpRows);
      __syncwarp();
      finish(acc, tile);
    }
    return;
  }
  // Larger windows: batches of kGpBatch chunks, each loaded then multiplied.
  for (; tile < tiles; tile += step) {
    float acc[kGpMaxNt][4] = {};
    for (int c0 = 0; c0 < p.s.chunks_even; c0 += kGpBatch) {
      const int nb = min(kGpBatch, p.s.chunks_even - c0);
      issue(tile, c0, nb, stages);
      CpAsyncCommit();
      CpAsyncWaitAll();
      __syncwarp();
      multiply(acc, c0, nb, stages);
      __syncwarp();
    }
    finish(acc, tile);
  }
}

template <typename T, typename OT>
LaunchStatus Launch(const GpFwdParams& params, bool in_dil, cudaStream_t stream) {
  const size_t smem = FwdSmem(params.s.taps, params.s.chunks_even, params.nt);
  auto kernel = in_dil ? GroupedFwdKernel<T, OT, true> : GroupedFwdKernel<T, OT, false>;
  // Over 48 KiB of dynamic shared memory needs the kernel's opt-in (a
  // function attribute, not a stream operation: capture-safe).
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  const int64_t tiles = (params.s.rows + kGpRows - 1) / kGpRows;
  const int groups = int(params.out_channels / params.out_group);
  // About one wave of CTAs over all groups (each warp walks its tiles,
  // loading the next while it multiplies), the prologue paid once a CTA.
  const int64_t per_group = std::max<int64_t>(1, 1024 / groups);
  const int64_t grid_y = std::min<int64_t>({(tiles + kGpWarps - 1) / kGpWarps, per_group, 65535});
  kernel<<<dim3(unsigned(groups), unsigned(grid_y)), kGpWarps * 32, smem, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace

const char* GroupedFwdRefusal(const ConvFwdArgs& p) {
  if (const char* why = GroupedGeometryRefusal(p.g)) return why;
  if (p.dtype != ffi::DataType::BF16 && p.dtype != ffi::DataType::F16)
    return "grouped_fwd: x and w must be bfloat16 or float16";
  if (p.out_dtype != p.dtype && p.out_dtype != ffi::DataType::F32)
    return "grouped_fwd: the output dtype must be x's or float32";
  if (p.e.has_bias && !DwIsFloat(p.bias_dtype)) return "grouped_fwd: the bias must be a float dtype";
  if (p.e.has_residual && p.residual_dtype != p.out_dtype)
    return "grouped_fwd: the residual must have the output's dtype";
  if (p.e.act < 0 || p.e.act >= kNumActs) return "grouped_fwd: unknown activation";
  if (FwdSmem(p.g.taps(), GpChunksEven(p.g), p.g.cout_g() / 8) > 160 * 1024)
    return "grouped_fwd: the window's weights do not fit in shared memory";
  return nullptr;
}

LaunchStatus GroupedFwdCuda(const ConvFwdArgs& p, cudaStream_t stream) {
  if (const char* why = GroupedFwdRefusal(p)) return LaunchStatus::Refused(why);
  if (!Aligned16(p.x) || !Aligned16(p.w) || !Aligned16(p.y) || !Aligned16(p.z) || !Aligned16(p.residual))
    return LaunchStatus::Refused("grouped_fwd: x, w, y, z and the residual must be 16-byte aligned");
  if (p.e.saved == kSavePreact && p.z == nullptr)
    return LaunchStatus::Refused("grouped_fwd: the pre-activation output z is missing");
  if (p.g.batch * p.g.out_positions() == 0) return cudaSuccess;
  if (GroupedTiledFwdServes(p)) return GroupedTiledFwdCuda(p, stream);
  GpFwdParams d{};
  d.s = GpGeometryOf(p.g, p.x);
  d.w = p.w;
  d.bias = p.e.has_bias ? p.bias : nullptr;
  d.residual = p.e.has_residual ? p.residual : nullptr;
  d.y = p.y;
  d.z = p.e.saved == kSavePreact ? p.z : nullptr;
  d.out_channels = p.g.out_channels;
  d.out_group = int(p.g.cout_g());
  d.nt = d.out_group / 8;
  d.bias_dtype = static_cast<int>(p.bias_dtype);
  d.act = p.e.act;
  d.act_param = p.e.act_param;
  d.alpha = p.e.alpha;
  d.beta = p.e.beta;
  if (d.s.rows == 0) return cudaSuccess;
  const bool in_dil = GpInputDilated(p.g);
  const bool wide = p.out_dtype == ffi::DataType::F32;
  if (p.dtype == ffi::DataType::BF16)
    return wide ? Launch<__nv_bfloat16, float>(d, in_dil, stream)
                : Launch<__nv_bfloat16, __nv_bfloat16>(d, in_dil, stream);
  return wide ? Launch<__half, float>(d, in_dil, stream) : Launch<__half, __half>(d, in_dil, stream);
}

}  // namespace jaxdnn::conv
