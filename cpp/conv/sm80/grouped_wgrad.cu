// The grouped weight gradient (grouped_wgrad.h).
#include "conv/sm80/grouped_wgrad.h"

#include <algorithm>
#include <cstdint>

#include "conv/sm80/depthwise_common.cuh"
#include "conv/sm80/grouped_common.cuh"
#include "conv/sm80/grouped_wgrad_reduce.cuh"
#include "conv/sm90/conv_sm90_workspace.h"

namespace jaxdnn::conv {
namespace {

constexpr int kGpAccTiles = 20;  // m16n8 float32 accumulator tiles a thread holds (80 registers)

struct GpWgradParams {
  GpGeometry s;    // x's side
  const void* dz;  // [rows, C_out]
  int64_t out_channels;
  int out_group, mt;
  float* partials;       // [groups, slices, taps * cin_g, out_group]
  float* bias_partials;  // [groups, slices, out_group] or null
};

// The plan: slices of positions a group, the workspace's two parts.
struct WgradPlan {
  int64_t slices = 0;
  size_t partial_bytes = 0, bias_bytes = 0;
  size_t smem = 0;
};

WgradPlan PlanOf(const ConvGeometry& g, bool bias) {
  WgradPlan w;
  const int64_t rows = g.batch * g.out_positions();
  const int64_t tiles = (rows + kGpRows - 1) / kGpRows;
  w.slices = std::max<int64_t>(1, std::min<int64_t>({(tiles + kGpWarps - 1) / kGpWarps,
                                                     std::max<int64_t>(1, 1024 / g.groups), 65535}));
  const int64_t wk = g.taps() * g.cin_g();
  w.partial_bytes = sm90::RoundUp(size_t(g.groups * w.slices * wk * g.cout_g()) * 4);
  w.bias_bytes = bias ? sm90::RoundUp(size_t(g.groups * w.slices * g.cout_g()) * 4) : 0;
  w.smem = size_t(kGpWarps) * 2 * size_t(GpChunksEven(g) + g.cout_g() / 8) * kGpRows * 16 +
           size_t(g.taps()) * 16 + size_t(wk * g.cout_g() + g.cout_g()) * 4;
  return w;
}

// kMaxMt * kNT <= kGpAccTiles accumulator tiles.
template <typename T, int kNT, int kMaxMt, bool kInDil>
__global__ void __launch_bounds__(kGpWarps * 32) GroupedWgradKernel(GpWgradParams p) {
  extern __shared__ uint4 smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int per_stage = (p.s.chunks_even + kNT) * kGpRows;
  uint4* stages = smem + warp * 2 * per_stage;
  int4* taps = reinterpret_cast<int4*>(smem + kGpWarps * 2 * per_stage);
  float* sums = reinterpret_cast<float*>(taps + p.s.taps);
  const int group = blockIdx.x;
  FillTapTable(p.s, taps);
  __syncthreads();

  float acc[kMaxMt][kNT][4];
#pragma unroll
  for (int mt = 0; mt < kMaxMt; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
  float bias_sum = 0.0f;
  const int row = lane & 15, half = lane >> 4, m = lane >> 3;
  const T* dz = static_cast<const T*>(p.dz) + int64_t(group) * p.out_group;
  const int64_t tiles = (p.s.rows + kGpRows - 1) / kGpRows;
  const int64_t step = int64_t(gridDim.y) * kGpWarps;
  // The tile's window rows of x, then its dz rows, into `stage`.
  auto issue = [&](int64_t tile, uint4* stage) {
    const int64_t position = tile * kGpRows + row;
    const GpRow<T> r = DecodeRow<T>(p.s, group, position);
    for (int c = half; c < p.s.chunks_even; c += 2)
      StageChunk<kInDil>(p.s, taps, r, c, stage + c * kGpRows + row);
    const T* dz_row = dz + (r.live ? position : 0) * p.out_channels;
    uint4* ds = stage + p.s.chunks_even * kGpRows;
    for (int nt = half; nt < kNT; nt += 2)
      CpAsync16(ds + nt * kGpRows + row, dz_row + nt * 8, r.live ? 16 : 0);
  };
  int64_t tile = int64_t(blockIdx.y) * kGpWarps + warp;
  int buf = 0;
  if (tile < tiles) issue(tile, stages);
  CpAsyncCommit();
  for (; tile < tiles; tile += step, buf ^= 1) {
    // The next tile's rows load while this one multiplies.
    if (tile + step < tiles) issue(tile + step, stages + (buf ^ 1) * per_stage);
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncwarp();
    const uint4* xs = stages + buf * per_stage;
    const uint4* ds = xs + p.s.chunks_even * kGpRows;
    // B fragments (k = positions, n = output channels): matrices
    // (positions 0-7 | 8-15) x (tile nt | nt + 1), transposed on load.
    uint32_t b[kNT][2];
#pragma unroll
    for (int np = 0; np < kNT; np += 2) {
      const int nt = min(np + (m >> 1), kNT - 1);
      uint32_t v[4];
      sm80::LdMatrixX4Trans(v, ds + nt * kGpRows + (lane & 7) + 8 * (m & 1));
      b[np][0] = v[0];
      b[np][1] = v[1];
      if (np + 1 < kNT) {
        b[np + 1][0] = v[2];
        b[np + 1][1] = v[3];
      }
    }
    // A fragments (m = the window's chunk rows, k = positions): matrices
    // (chunk 2mt | 2mt + 1) x (positions 0-7 | 8-15), transposed on load.
#pragma unroll
    for (int mt = 0; mt < kMaxMt; ++mt) {
      if (mt < p.mt) {
        uint32_t a[4];
        sm80::LdMatrixX4Trans(a, xs + (2 * mt + (m & 1)) * kGpRows + (lane & 7) + 8 * (m >> 1));
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) sm80::MmaOp<T>::Run(acc[mt][nt], a, b[nt][0], b[nt][1]);
      }
    }
    if (p.bias_partials != nullptr && lane < p.out_group) {
      const T* col = reinterpret_cast<const T*>(ds + (lane >> 3) * kGpRows) + (lane & 7);
#pragma unroll 4
      for (int i = 0; i < kGpRows; ++i) bias_sum += float(col[i * 8]);
    }
    __syncwarp();
  }

  // The CTA's warps added in order into `sums`, then written as this
  // slice's partial.
  const int gid = lane >> 2, tig = lane & 3;
  const int wk = p.s.chunks * 8;
  for (int w = 0; w < kGpWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int mt = 0; mt < kMaxMt; ++mt) {
        if (mt >= p.mt) break;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int chunk = 2 * mt + (e >> 1);
          if (chunk >= p.s.chunks) continue;
          const int k = chunk * 8 + gid;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            const int at = k * p.out_group + nt * 8 + tig * 2 + (e & 1);
            sums[at] = (w == 0 ? 0.0f : sums[at]) + acc[mt][nt][e];
          }
        }
      }
      if (lane < p.out_group) {
        float* bs = sums + wk * p.out_group;
        bs[lane] = (w == 0 ? 0.0f : bs[lane]) + bias_sum;
      }
    }
    __syncthreads();
  }
  const int64_t slice = int64_t(group) * gridDim.y + blockIdx.y;
  float* out = p.partials + slice * wk * p.out_group;
  for (int i = threadIdx.x; i < wk * p.out_group; i += blockDim.x) out[i] = sums[i];
  if (p.bias_partials != nullptr && threadIdx.x < p.out_group)
    p.bias_partials[slice * p.out_group + threadIdx.x] = sums[wk * p.out_group + threadIdx.x];
}

template <typename T, int kNT, int kMaxMt>
LaunchStatus LaunchNt(const GpWgradParams& d, const WgradPlan& plan, int groups, bool in_dil,
                      cudaStream_t stream) {
  auto kernel = in_dil ? GroupedWgradKernel<T, kNT, kMaxMt, true> : GroupedWgradKernel<T, kNT, kMaxMt, false>;
  if (plan.smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.smem));
    if (e != cudaSuccess) return e;
  }
  kernel<<<dim3(unsigned(groups), unsigned(plan.slices)), kGpWarps * 32, plan.smem, stream>>>(d);
  return cudaGetLastError();
}

template <typename T>
LaunchStatus Launch(const ConvWgradArgs& p, const GpWgradParams& d, const WgradPlan& plan,
                    cudaStream_t stream) {
  const int groups = int(p.g.groups);
  const bool in_dil = GpInputDilated(p.g);
  LaunchStatus s;
  switch (d.out_group / 8) {
    // One output chunk: a 3x3 window of 8 channels (ResNeXt's groups) keeps
    // 5 tiles, and 40 registers, instead of 20.
    case 1:
      s = d.mt <= 5 ? LaunchNt<T, 1, 5>(d, plan, groups, in_dil, stream)
                    : LaunchNt<T, 1, kGpAccTiles>(d, plan, groups, in_dil, stream);
      break;
    case 2: s = LaunchNt<T, 2, kGpAccTiles / 2>(d, plan, groups, in_dil, stream); break;
    default: s = LaunchNt<T, 4, kGpAccTiles / 4>(d, plan, groups, in_dil, stream); break;
  }
  if (!s.ok()) return s;
  return LaunchGroupedWgradReduce(p, d.partials, d.bias_partials, plan.slices, stream);
}

}  // namespace

const char* GroupedWgradRefusal(const ConvWgradArgs& p) {
  if (const char* why = GroupedGeometryRefusal(p.g)) return why;
  if (p.dtype != ffi::DataType::BF16 && p.dtype != ffi::DataType::F16)
    return "grouped_wgrad: x must be bfloat16 or float16";
  if (p.dy_dtype != p.dtype) return "grouped_wgrad: dz must have x's dtype";
  if (static_cast<Act>(p.e.act) != Act::kIdentity || p.e.saved != kSaveNothing)
    return "grouped_wgrad: takes dz (the activation's derivative applied by the caller)";
  if (p.e.has_bias && !DwIsFloat(p.bias_dtype))
    return "grouped_wgrad: the bias gradient must be float32, bfloat16 or float16";
  if (GroupedTiledWgradServes(p)) return nullptr;
  const int nt = int(p.g.cout_g() / 8);
  if (nt == 3) return "grouped_wgrad: 24 output channels a group are not served";
  if (GpChunksEven(p.g) / 2 * nt > kGpAccTiles)
    return "grouped_wgrad: the group's window needs more than 20 accumulator tiles";
  if (PlanOf(p.g, p.e.has_bias).smem > 160 * 1024) return "grouped_wgrad: the group's window does not fit";
  return nullptr;
}

size_t GroupedWgradWorkspace(const ConvWgradArgs& p) {
  if (GroupedTiledWgradServes(p)) return GroupedTiledWgradWorkspace(p);
  const WgradPlan w = PlanOf(p.g, p.e.has_bias);
  return w.partial_bytes + w.bias_bytes;
}

LaunchStatus GroupedWgradCuda(const ConvWgradArgs& p, cudaStream_t stream) {
  if (const char* why = GroupedWgradRefusal(p)) return LaunchStatus::Refused(why);
  if (p.e.has_bias && p.dbias == nullptr)
    return LaunchStatus::Refused("grouped_wgrad: the bias gradient is null");
  if (!Aligned16(p.x) || !Aligned16(p.dy))
    return LaunchStatus::Refused("grouped_wgrad: x and dz must be 16-byte aligned");
  if (GroupedTiledWgradServes(p)) return GroupedTiledWgradCuda(p, stream);
  const WgradPlan plan = PlanOf(p.g, p.e.has_bias);
  if (p.workspace == nullptr || p.workspace_bytes < plan.partial_bytes + plan.bias_bytes)
    return LaunchStatus::Refused("grouped_wgrad: workspace smaller than GroupedWgradWorkspace");
  if (p.e.has_bias && p.dbias == nullptr)
    return LaunchStatus::Refused("grouped_wgrad: the bias gradient is null");
  if (!Aligned16(p.x) || !Aligned16(p.dy))
    return LaunchStatus::Refused("grouped_wgrad: x and dz must be 16-byte aligned");
  GpWgradParams d{};
  d.s = GpGeometryOf(p.g, p.x);
  d.dz = p.dy;
  d.out_channels = p.g.out_channels;
  d.out_group = int(p.g.cout_g());
  d.mt = d.s.chunks_even / 2;
  char* ws = static_cast<char*>(p.workspace);
  d.partials = reinterpret_cast<float*>(ws);
  d.bias_partials = p.e.has_bias ? reinterpret_cast<float*>(ws + plan.partial_bytes) : nullptr;
  if (p.dtype == ffi::DataType::BF16) return Launch<__nv_bfloat16>(p, d, plan, stream);
  return Launch<__half>(p, d, plan, stream);
}

}  // namespace jaxdnn::conv
