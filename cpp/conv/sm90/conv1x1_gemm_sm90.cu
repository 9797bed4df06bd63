// The 1x1 forward GEMM's launcher (conv1x1_gemm_sm90.h): the plan, the bias
// widened where it must be, and the CUTLASS kernel of the tile width the
// plan picks (conv1x1_gemm_sm90_n128.cu / _n256.cu).
#include "conv/sm90/conv1x1_gemm_sm90.h"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <limits>
#include <string>

#include "common/activation.h"
#include "common/cuda_device.h"
#include "common/switches.h"
#include "conv/sm90/conv1x1_gemm_sm90_plan.h"
#include "conv/sm90/conv_sm90_aux.h"

namespace jaxdnn::conv {
namespace {

using sm90::GemmPlan;
using sm90::RoundUp;

// The CTA tile's C_out width: 256 where C_out is a multiple of 256 and the
// 128x256 tiles still make two waves over an H100's 132 SMs, else 128 (a
// guess until measured: docs/perf/conv.md); JAXDNN_CONV_1X1_GEMM=128 or 256
// forces one.
int TileN(int64_t m, int64_t out_channels) {
  const std::string forced = SwitchText(Switch::kConv1x1Gemm);
  if (forced == "128" || forced == "256") return std::stoi(forced);
  const int64_t tiles = (m + 127) / 128 * (out_channels / 256);
  return out_channels % 256 == 0 && tiles >= 2 * 132 ? 256 : 128;
}

bool FitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

// nullptr when p is served (filling *pl), else the reason.
const char* MakePlan(const ConvFwdArgs& p, GemmPlan* pl) {
  const ConvGeometry& g = p.g;
  if (!IsPointwiseGemm(g)) {
    return "conv1x1_gemm_sm90: only 1x1, stride-1, unpadded, undilated, ungrouped convolutions are GEMMs";
  }
  if (p.dtype != ffi::DataType::BF16 && p.dtype != ffi::DataType::F16) {
    return "conv1x1_gemm_sm90: x and w must be bfloat16 or float16";
  }
  if (p.out_dtype != p.dtype) return "conv1x1_gemm_sm90: y must have x's dtype";
  switch (static_cast<Act>(p.e.act)) {
    case Act::kIdentity:
      pl->clamp_lo = -std::numeric_limits<float>::infinity();
      pl->clamp_hi = -pl->clamp_lo;
      break;
    case Act::kRelu:
      pl->clamp_lo = 0.0f;
      pl->clamp_hi = std::numeric_limits<float>::infinity();
      break;
    case Act::kRelu6:
      pl->clamp_lo = 0.0f;
      pl->clamp_hi = 6.0f;
      break;
    default: return "conv1x1_gemm_sm90: only the identity, relu and relu6 epilogues are compiled";
  }
  // Those three save nothing or y; a z would have no kernel writing it.
  if (p.e.saved == kSavePreact) return "conv1x1_gemm_sm90: saving the pre-activation z is not compiled";
  if (p.e.has_residual && p.residual_dtype != p.out_dtype) {
    return "conv1x1_gemm_sm90: the residual must have y's dtype";
  }
  if (p.e.has_bias && p.bias_dtype != ffi::DataType::F32 && p.bias_dtype != ffi::DataType::BF16 &&
      p.bias_dtype != ffi::DataType::F16 && p.bias_dtype != ffi::DataType::F64) {
    return "conv1x1_gemm_sm90: unsupported bias dtype";
  }
  const int64_t m = g.batch * g.out_positions();
  if (m == 0) {
    pl->empty = true;
    return nullptr;
  }
  if (g.in_channels % 8 != 0 || g.out_channels % 8 != 0) {
    return "conv1x1_gemm_sm90: C_in and C_out must be positive multiples of 8 (16-byte TMA strides)";
  }
  if (!FitsInt(m) || !FitsInt(g.in_channels) || !FitsInt(g.out_channels)) {
    return "conv1x1_gemm_sm90: N * positions and the channels must be below 2^31";
  }
  pl->m = int(m);
  pl->n = int(g.out_channels);
  pl->k = int(g.in_channels);
  pl->half = p.dtype == ffi::DataType::F16;
  pl->tile_n = TileN(m, g.out_channels);
  pl->bias_bytes = p.e.has_bias ? RoundUp(size_t(g.out_channels) * sizeof(float)) : 0;
  return nullptr;
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Fn<kHalf, kTileN>::Call(args...) for the plan's configuration.
template <template <bool, int> class Fn, class... Args>
auto Dispatch(const GemmPlan& pl, Args&&... args) {
  if (pl.half) {
    return pl.tile_n == 256 ? Fn<true, 256>::Call(args...) : Fn<true, 128>::Call(args...);
  }
  return pl.tile_n == 256 ? Fn<false, 256>::Call(args...) : Fn<false, 128>::Call(args...);
}

template <bool H, int N>
struct WorkspaceOf {
  static size_t Call(const GemmPlan& pl) { return sm90::GemmCutlassWorkspace<H, N>(pl); }
};
template <bool H, int N>
struct ImplementableOf {
  static bool Call(const GemmPlan& pl, float alpha, float beta) {
    return sm90::GemmImplementable<H, N>(pl, alpha, beta);
  }
};
template <bool H, int N>
struct LaunchOf {
  template <class... A>
  static LaunchStatus Call(const A&... a) {
    return sm90::GemmLaunch<H, N>(a...);
  }
};

LaunchStatus Run(const ConvFwdArgs& p, const GemmPlan& pl, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream) {
  const size_t cutlass_bytes = Dispatch<WorkspaceOf>(pl, pl);
  if (workspace_bytes < cutlass_bytes + pl.bias_bytes || workspace == nullptr) {
    return LaunchStatus::Refused("conv1x1_gemm_sm90: workspace smaller than Conv1x1GemmSm90Workspace");
  }
  const bool has_res = p.e.has_residual;
  if ((p.e.has_bias && p.bias == nullptr) || (has_res && p.residual == nullptr)) {
    return LaunchStatus::Refused("conv1x1_gemm_sm90: bias or residual flagged but null");
  }
  if (!Aligned16(workspace) || !Aligned16(p.x) || !Aligned16(p.w) || !Aligned16(p.y) ||
      (has_res && !Aligned16(p.residual))) {
    return LaunchStatus::Refused(
        "conv1x1_gemm_sm90: x, w, y, residual and workspace must be 16-byte aligned");
  }
  // Without a residual, beta = 0 keeps C unread (CUTLASS skips its loads);
  // y stands in as C so that C's TMA descriptor is still a valid one.
  const float beta = has_res ? p.e.beta : 0.0f;
  if (!Dispatch<ImplementableOf>(pl, pl, p.e.alpha, beta)) {
    return LaunchStatus::Refused("conv1x1_gemm_sm90: CUTLASS cannot implement the GEMM");
  }
  char* ws = static_cast<char*>(workspace);
  const float* bias = nullptr;
  if (p.e.has_bias) {
    // A float32 bias in place where its 16-byte vector loads can read it;
    // else widened into the workspace (one small kernel, stream-ordered).
    if (p.bias_dtype == ffi::DataType::F32 && Aligned16(p.bias)) {
      bias = static_cast<const float*>(p.bias);
    } else {
      float* wide = reinterpret_cast<float*>(ws + cutlass_bytes);
      const cudaError_t err = sm90::WidenBias(p.bias, p.bias_dtype, wide, pl.n, stream);
      if (err != cudaSuccess) return err;
      bias = wide;
    }
  }
  int device = 0, sms = 0;
  cudaError_t err = StreamDevice(stream, &device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  void* cutlass_ws = cutlass_bytes > 0 ? workspace : nullptr;
  const void* c = has_res ? p.residual : p.y;
  return Dispatch<LaunchOf>(pl, pl, p.e.alpha, beta, p.x, p.w, bias, c, p.y, cutlass_ws, device, sms, stream);
}

}  // namespace

bool IsPointwiseGemm(const ConvGeometry& g) {
  if (g.groups != 1) return false;
  for (int k = 0; k < 3; ++k) {
    if (g.window[k] != 1 || g.stride[k] != 1 || g.pad_lo[k] != 0 || g.in_dilation[k] != 1 ||
        g.k_dilation[k] != 1 || g.out[k] != g.in[k]) {
      return false;
    }
  }
  return true;
}

const char* Conv1x1GemmSm90Refusal(const ConvFwdArgs& p) {
  GemmPlan pl;
  if (const char* why = MakePlan(p, &pl)) return why;
  if (pl.empty) return nullptr;
  const float beta = p.e.has_residual ? p.e.beta : 0.0f;
  if (!Dispatch<ImplementableOf>(pl, pl, p.e.alpha, beta)) {
    return "conv1x1_gemm_sm90: CUTLASS cannot implement the GEMM";
  }
  return nullptr;
}

int Conv1x1GemmSm90TileN(const ConvFwdArgs& p) {
  return TileN(p.g.batch * p.g.out_positions(), p.g.out_channels);
}

size_t Conv1x1GemmSm90Workspace(const ConvFwdArgs& p) {
  GemmPlan pl;
  if (MakePlan(p, &pl) != nullptr || pl.empty) return 0;
  return Dispatch<WorkspaceOf>(pl, pl) + pl.bias_bytes;
}

LaunchStatus Conv1x1GemmSm90(const ConvFwdArgs& p, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream) {
  GemmPlan pl;
  if (const char* why = MakePlan(p, &pl)) return LaunchStatus::Refused(why);
  if (pl.empty) return cudaSuccess;
  return Run(p, pl, workspace, workspace_bytes, stream);
}

}  // namespace jaxdnn::conv
