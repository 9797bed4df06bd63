// The sm90 data-gradient convolution's launcher (conv_dgrad_sm90.h): the
// plan, the weights packed K-major, the pre-pass, and the CUTLASS kernel of
// the tile width the plan picks (conv_dgrad_sm90_n64.cu / _n128.cu).
#include "conv/sm90/conv_dgrad_sm90.h"

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

struct DgradPlan {
  GradProblem pr;
  bool empty = false;    // dy is empty: dx is zero
  bool need_dz = false;  // an activation: the GEMM reads dz from the workspace
  size_t wt_bytes = 0, dz_bytes = 0;
  int64_t chunk = 1;  // samples per CUTLASS problem
};

bool ResidualDtypeOk(ffi::DataType t) {
  return t == ffi::DataType::F32 || t == ffi::DataType::BF16 || t == ffi::DataType::F16;
}

// nullptr when p is served (filling *pl), else the reason.
const char* MakePlan(const ConvDgradArgs& p, DgradPlan* pl) {
  const ConvGeometry& g = p.g;
  if (const char* why = sm90::GradKindRefusal(g, p.dtype, p.dy_dtype, p.e.act)) return why;
  if (p.e.has_residual && !ResidualDtypeOk(p.residual_dtype)) {
    return "conv_dgrad_sm90: the residual gradient must be float32, bfloat16 or float16";
  }
  for (int k = 0; k < 3; ++k) {
    if (g.stride[k] != 1) {
      return "conv_dgrad_sm90: strides > 1 are not served (CUTLASS's sm90 dgrad has no strided mode)";
    }
  }
  if (sm90::GradEmpty(g)) {
    pl->empty = true;
    return nullptr;
  }
  const bool half = p.dtype == ffi::DataType::F16;
  if (const char* why = sm90::PoseGradProblem(g, half, &pl->pr)) return why;
  pl->pr.tile = g.in_channels <= 64 ? 64 : 128;  // a 128-wide tile would idle half its MMAs
  pl->need_dz = static_cast<Act>(p.e.act) != Act::kIdentity;
  pl->wt_bytes = RoundUp(size_t(g.weights()) * 2);
  pl->dz_bytes = pl->need_dz ? RoundUp(size_t(g.batch * g.out_positions() * g.out_channels) * 2) : 0;
  pl->chunk = std::min(g.batch, sm90::MaxSamplesPerProblem(g));
  return nullptr;
}

bool Implementable(const GradProblem& pr) {
  if (pr.half) {
    return pr.tile == 64 ? sm90::DgradImplementable<true, 64>(pr) : sm90::DgradImplementable<true, 128>(pr);
  }
  return pr.tile == 64 ? sm90::DgradImplementable<false, 64>(pr) : sm90::DgradImplementable<false, 128>(pr);
}

LaunchStatus Gemm(const GradProblem& pr, float alpha, const void* dz, const void* wt, void* dx,
                  cudaStream_t stream) {
  if (pr.half) {
    return pr.tile == 64 ? sm90::DgradLaunch<true, 64>(pr, alpha, dz, wt, dx, stream)
                         : sm90::DgradLaunch<true, 128>(pr, alpha, dz, wt, dx, stream);
  }
  return pr.tile == 64 ? sm90::DgradLaunch<false, 64>(pr, alpha, dz, wt, dx, stream)
                       : sm90::DgradLaunch<false, 128>(pr, alpha, dz, wt, dx, stream);
}

constexpr const char* kOutsideTma =
    "conv_dgrad_sm90: outside CUTLASS's 3-D im2col TMA limits (per dim: padding <= 16, "
    "(window - 1) * dilation <= 30, (window - 1) * dilation - padding <= 16)";

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

const char* OperandRefusal(const ConvDgradArgs& p) {
  if ((static_cast<Act>(p.e.act) != Act::kIdentity && p.saved == nullptr) ||
      (p.e.has_residual && p.dresidual == nullptr)) {
    return "conv_dgrad_sm90: saved or residual gradient flagged but null";
  }
  if (!Aligned16(p.workspace) || !Aligned16(p.dy) || !Aligned16(p.dx) || !Aligned16(p.saved) ||
      !Aligned16(p.dresidual)) {
    return "conv_dgrad_sm90: dy, saved, dx, the residual gradient and the workspace must be 16-byte aligned";
  }
  return nullptr;
}

// dz = act'(saved) * dy into dz (where not null) and beta * dz into the
// residual's gradient (where the call has one).
cudaError_t RunPrepass(const ConvDgradArgs& p, void* dz, cudaStream_t stream) {
  sm90::Prepass pre;
  pre.dy = p.dy;
  pre.saved = p.saved;
  pre.dz = dz;
  pre.dres = p.dresidual;
  pre.dres_dtype = p.residual_dtype;
  pre.rows = p.g.batch * p.g.out_positions();
  pre.channels = int(p.g.out_channels);
  pre.act = p.e.act;
  pre.act_param = p.e.act_param;
  pre.beta = p.e.beta;
  pre.half = p.dtype == ffi::DataType::F16;
  return sm90::RunPrepass(pre, stream);
}

LaunchStatus Run(const ConvDgradArgs& p, const DgradPlan& pl, cudaStream_t stream) {
  const ConvGeometry& g = p.g;
  if (p.workspace == nullptr || p.workspace_bytes < pl.wt_bytes + pl.dz_bytes) {
    return LaunchStatus::Refused("conv_dgrad_sm90: workspace smaller than ConvDgradSm90Workspace");
  }
  if (const char* why = OperandRefusal(p)) return LaunchStatus::Refused(why);
  char* ws = static_cast<char*>(p.workspace);
  void* wt = ws;
  void* dz = pl.need_dz ? ws + pl.wt_bytes : nullptr;
  const int taps = int(g.taps()), cin = int(g.in_channels), cout = int(g.out_channels);
  cudaError_t err =
      sm90::PackWeightsKMajor(p.w, wt, taps, cin, cout, nullptr, ffi::DataType::F32, nullptr, stream);
  if (err != cudaSuccess) return err;
  if (pl.need_dz || p.e.has_residual) {
    err = RunPrepass(p, dz, stream);
    if (err != cudaSuccess) return err;
  }
  const uint16_t* src = static_cast<const uint16_t*>(pl.need_dz ? dz : p.dy);
  uint16_t* dx = static_cast<uint16_t*>(p.dx);
  const int64_t src_step = g.out_positions() * cout, dx_step = g.in_positions() * cin;
  for (int64_t n0 = 0; n0 < g.batch; n0 += pl.chunk) {
    GradProblem pr = pl.pr;
    pr.act[0] = int(std::min(pl.chunk, g.batch - n0));
    if (!Implementable(pr)) return LaunchStatus::Refused(kOutsideTma);
    const LaunchStatus s = Gemm(pr, p.e.alpha, src + n0 * src_step, wt, dx + n0 * dx_step, stream);
    if (!s.ok()) return s;
  }
  return cudaSuccess;
}

}  // namespace

const char* ConvDgradSm90Refusal(const ConvDgradArgs& p) {
  ConvDgradArgs one = p;
  one.g.batch = 1;  // the rules do not depend on the batch
  DgradPlan pl;
  if (const char* why = MakePlan(one, &pl)) return why;
  if (!pl.empty && !Implementable(pl.pr)) return kOutsideTma;
  return nullptr;
}

int ConvDgradSm90TileN(const ConvDgradArgs& p) { return p.g.in_channels <= 64 ? 64 : 128; }

size_t ConvDgradSm90Workspace(const ConvDgradArgs& p) {
  DgradPlan pl;
  if (MakePlan(p, &pl) != nullptr || pl.empty) return 0;
  return pl.wt_bytes + pl.dz_bytes;
}

LaunchStatus ConvDgradSm90(const ConvDgradArgs& p, cudaStream_t stream) {
  DgradPlan pl;
  if (const char* why = MakePlan(p, &pl)) return LaunchStatus::Refused(why);
  if (pl.empty) {  // dy is empty: dx is zero, the residual's gradient has no element
    const size_t dx_bytes = size_t(p.g.batch * p.g.in_positions() * p.g.in_channels) * 2;
    return dx_bytes > 0 ? cudaMemsetAsync(p.dx, 0, dx_bytes, stream) : cudaSuccess;
  }
  return Run(p, pl, stream);
}

}  // namespace jaxdnn::conv
