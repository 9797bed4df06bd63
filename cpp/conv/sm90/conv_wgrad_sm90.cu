// The sm90 weight-gradient convolution's launcher (conv_wgrad_sm90.h): the
// plan (tile and batch parts), the pre-pass, the CUTLASS kernel of the tile
// height the plan picks (conv_wgrad_sm90_m64.cu / _m128.cu), and the
// in-order sums of the partials.
#include "conv/sm90/conv_wgrad_sm90.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/activation.h"
#include "conv/sm90/conv_grad_sm90_plan.h"
#include "conv/sm90/conv_grad_sm90_pose.h"
#include "conv/sm90/conv_sm90_aux.h"
#include "conv/sm90/conv_sm90_workspace.h"

namespace jaxdnn::conv {
namespace {

using sm90::GradProblem;
using sm90::RoundUp;
using sm90::WgradParts;

// About two waves of an H100's 132 SMs (a constant, not the device's: the
// parts, hence the sums' order, depend on the shape only).
constexpr int64_t kTargetCtas = 264;
// Output positions a part keeps at least (32 K tiles of 64).
constexpr int64_t kMinPartPositions = 2048;
// The parts' float32 partials stop growing past this (one part always fits).
constexpr size_t kMaxPartialBytes = size_t(64) << 20;

struct WgradPlan {
  GradProblem pr;
  WgradParts parts;
  bool empty = false;    // dy is empty: dw and d bias are zero
  bool need_dz = false;  // an activation: the GEMM reads dz from the workspace
  size_t dz_bytes = 0, partial_bytes = 0, bias_bytes = 0;
  int bias_blocks = 0;
};

bool BiasDtypeOk(ffi::DataType t) {
  return t == ffi::DataType::F32 || t == ffi::DataType::BF16 || t == ffi::DataType::F16;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t Tiles(const ConvGeometry& g, int tile_m) {
  return CeilDiv(g.out_channels, tile_m) * CeilDiv(g.in_channels, 64) * g.taps();
}

// 128 output channels per tile where that still fills about two waves with
// the most parts one launch takes, else 64 (more, smaller tiles).
int TileM(const ConvGeometry& g) {
  return g.out_channels > 64 && Tiles(g, 128) * sm90::kWgradPartsPerLaunch >= kTargetCtas ? 128 : 64;
}

// The batch cut: enough parts to fill the target CTAs over the weight
// tiles, none smaller than kMinPartPositions positions, the partials within
// kMaxPartialBytes, and each part's positions within int32.
WgradParts PartsOf(const ConvGeometry& g, int tile_m) {
  const int64_t weights = g.weights();
  int64_t want = CeilDiv(kTargetCtas, Tiles(g, tile_m));
  want = std::min(want, std::max<int64_t>(1, g.batch * g.out_positions() / kMinPartPositions));
  want = std::min<int64_t>(want, sm90::kWgradPartsPerLaunch);
  want = std::min<int64_t>(want, std::max<int64_t>(1, int64_t(kMaxPartialBytes / (size_t(weights) * 4))));
  int64_t per_part = std::min(CeilDiv(g.batch, std::max<int64_t>(want, 1)), sm90::MaxSamplesPerProblem(g));
  WgradParts parts;
  parts.per_part = int(per_part);
  parts.count = int(CeilDiv(g.batch, per_part));
  parts.batch = g.batch;
  parts.x_step = g.in_positions() * g.in_channels;
  parts.dz_step = g.out_positions() * g.out_channels;
  parts.partial_elems = weights;
  return parts;
}

// nullptr when p is served (filling *pl), else the reason.
const char* MakePlan(const ConvWgradArgs& p, WgradPlan* pl) {
  const ConvGeometry& g = p.g;
  if (const char* why = sm90::GradKindRefusal(g, p.dtype, p.dy_dtype, p.e.act)) return why;
  if (p.e.has_bias && !BiasDtypeOk(p.bias_dtype)) {
    return "conv_wgrad_sm90: the bias gradient must be float32, bfloat16 or float16";
  }
  if (sm90::GradEmpty(g)) {
    pl->empty = true;
    return nullptr;
  }
  const bool half = p.dtype == ffi::DataType::F16;
  if (const char* why = sm90::PoseGradProblem(g, half, &pl->pr)) return why;
  pl->pr.tile = TileM(g);
  pl->parts = PartsOf(g, pl->pr.tile);
  pl->need_dz = static_cast<Act>(p.e.act) != Act::kIdentity;
  const int64_t rows = g.batch * g.out_positions();
  pl->dz_bytes = pl->need_dz ? RoundUp(size_t(rows * g.out_channels) * 2) : 0;
  pl->partial_bytes = RoundUp(size_t(pl->parts.count) * size_t(g.weights()) * 4);
  if (p.e.has_bias) {
    pl->bias_blocks = sm90::BiasRowBlocks(rows, int(g.out_channels));
    pl->bias_bytes = RoundUp(size_t(pl->bias_blocks) * size_t(g.out_channels) * 4);
  }
  return nullptr;
}

bool Implementable(const GradProblem& pr) {
  if (pr.half) {
    return pr.tile == 64 ? sm90::WgradImplementable<true, 64>(pr) : sm90::WgradImplementable<true, 128>(pr);
  }
  return pr.tile == 64 ? sm90::WgradImplementable<false, 64>(pr) : sm90::WgradImplementable<false, 128>(pr);
}

LaunchStatus Gemm(const GradProblem& pr, const WgradParts& parts, const void* x, const void* dz,
                  float* partials, cudaStream_t stream) {
  if (pr.half) {
    return pr.tile == 64 ? sm90::WgradLaunch<true, 64>(pr, parts, x, dz, partials, stream)
                         : sm90::WgradLaunch<true, 128>(pr, parts, x, dz, partials, stream);
  }
  return pr.tile == 64 ? sm90::WgradLaunch<false, 64>(pr, parts, x, dz, partials, stream)
                       : sm90::WgradLaunch<false, 128>(pr, parts, x, dz, partials, stream);
}

constexpr const char* kOutsideTma =
    "conv_wgrad_sm90: outside CUTLASS's 3-D im2col TMA limits (per dim: padding <= 16, "
    "(window - 1) * dilation <= 30)";

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

size_t DtypeBytes(ffi::DataType t) { return t == ffi::DataType::F32 ? 4 : 2; }

LaunchStatus Run(const ConvWgradArgs& p, const WgradPlan& pl, cudaStream_t stream) {
  const ConvGeometry& g = p.g;
  if (p.workspace == nullptr || p.workspace_bytes < pl.dz_bytes + pl.partial_bytes + pl.bias_bytes) {
    return LaunchStatus::Refused("conv_wgrad_sm90: workspace smaller than ConvWgradSm90Workspace");
  }
  if ((pl.need_dz && p.saved == nullptr) || (p.e.has_bias && p.dbias == nullptr)) {
    return LaunchStatus::Refused("conv_wgrad_sm90: saved or bias gradient flagged but null");
  }
  if (!Aligned16(p.workspace) || !Aligned16(p.x) || !Aligned16(p.dy) || !Aligned16(p.saved)) {
    return LaunchStatus::Refused("conv_wgrad_sm90: x, dy, saved and the workspace must be 16-byte aligned");
  }
  // The largest part (the others differ only in a smaller batch).
  GradProblem largest = pl.pr;
  largest.act[0] = pl.parts.per_part;
  if (!Implementable(largest)) return LaunchStatus::Refused(kOutsideTma);
  char* ws = static_cast<char*>(p.workspace);
  void* dz = pl.need_dz ? ws : nullptr;
  float* partials = reinterpret_cast<float*>(ws + pl.dz_bytes);
  float* bias_partials =
      p.e.has_bias ? reinterpret_cast<float*>(ws + pl.dz_bytes + pl.partial_bytes) : nullptr;
  const int cout = int(g.out_channels);
  if (pl.need_dz || p.e.has_bias) {
    sm90::Prepass pre;
    pre.dy = p.dy;
    pre.saved = p.saved;
    pre.dz = dz;
    pre.bias_partials = bias_partials;
    pre.rows = g.batch * g.out_positions();
    pre.channels = cout;
    pre.act = p.e.act;
    pre.act_param = p.e.act_param;
    pre.half = pl.pr.half;
    const cudaError_t err = sm90::RunPrepass(pre, stream);
    if (err != cudaSuccess) return err;
  }
  const LaunchStatus s = Gemm(pl.pr, pl.parts, p.x, pl.need_dz ? dz : p.dy, partials, stream);
  if (!s.ok()) return s;
  cudaError_t err = sm90::UnpackWeightGrad(partials, pl.parts.count, pl.parts.partial_elems, p.dw, pl.pr.half,
                                           int(g.taps()), int(g.in_channels), cout, p.e.alpha, stream);
  if (err != cudaSuccess) return err;
  if (p.e.has_bias) {
    err = sm90::FinishBiasGrad(bias_partials, pl.bias_blocks, cout, p.dbias, p.bias_dtype, stream);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace

const char* ConvWgradSm90Refusal(const ConvWgradArgs& p) {
  ConvWgradArgs one = p;
  one.g.batch = 1;  // the rules do not depend on the batch
  WgradPlan pl;
  if (const char* why = MakePlan(one, &pl)) return why;
  if (!pl.empty && !Implementable(pl.pr)) return kOutsideTma;
  return nullptr;
}

int ConvWgradSm90TileM(const ConvWgradArgs& p) { return TileM(p.g); }

int ConvWgradSm90Parts(const ConvWgradArgs& p) {
  WgradPlan pl;
  if (MakePlan(p, &pl) != nullptr || pl.empty) return 0;
  return pl.parts.count;
}

size_t ConvWgradSm90Workspace(const ConvWgradArgs& p) {
  WgradPlan pl;
  if (MakePlan(p, &pl) != nullptr || pl.empty) return 0;
  return pl.dz_bytes + pl.partial_bytes + pl.bias_bytes;
}

LaunchStatus ConvWgradSm90(const ConvWgradArgs& p, cudaStream_t stream) {
  WgradPlan pl;
  if (const char* why = MakePlan(p, &pl)) return LaunchStatus::Refused(why);
  if (pl.empty) {
    const ConvGeometry& g = p.g;
    cudaError_t err = cudaMemsetAsync(p.dw, 0, size_t(g.weights()) * 2, stream);
    if (err == cudaSuccess && p.dbias != nullptr) {
      err = cudaMemsetAsync(p.dbias, 0, size_t(g.out_channels) * DtypeBytes(p.bias_dtype), stream);
    }
    return err;
  }
  return Run(p, pl, stream);
}

}  // namespace jaxdnn::conv
