// The sm90 forward convolution's launcher (conv_fprop_sm90.h): the plan,
// the weights transposed K-major, and the CUTLASS kernel of the tile width
// the plan picks (conv_fprop_sm90_n64.cu / _n128.cu).
#include "conv/sm90/conv_fprop_sm90.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <string>

#include "common/activation.h"
#include "common/switches.h"
#include "conv/sm90/conv_fprop_sm90_plan.h"
#include "conv/sm90/conv_sm90_aux.h"

namespace jaxdnn::conv {
namespace {

using sm90::Plan;
using sm90::RoundUp;

// The CTA tile's C_out width: 64 where C_out fits it (a 128-wide tile would
// idle half its MMAs), else 128; JAXDNN_CONV_TILE_N forces one.
int TileN(int64_t out_channels) {
  const std::string forced = SwitchText(Switch::kConvTileN);
  if (forced == "64" || forced == "128") return std::stoi(forced);
  return out_channels <= 64 ? 64 : 128;
}

bool FitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

// nullptr when p is served (filling *pl), else the reason.
const char* MakePlan(const ConvFwdArgs& p, Plan* pl) {
  const ConvGeometry& g = p.g;
  if (p.dtype != ffi::DataType::BF16 && p.dtype != ffi::DataType::F16) {
    return "conv_fprop_sm90: x and w must be bfloat16 or float16";
  }
  if (p.out_dtype != p.dtype) return "conv_fprop_sm90: y must have x's dtype";
  if (g.groups != 1) return "conv_fprop_sm90: groups > 1 is not compiled";
  for (int k = 0; k < 3; ++k) {
    if (g.in_dilation[k] != 1) return "conv_fprop_sm90: input dilation (transposed conv) is not compiled";
    if (g.stride[k] < 1 || g.k_dilation[k] < 1 || g.window[k] < 1) {
      return "conv_fprop_sm90: strides, dilations and window must be positive";
    }
  }
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
    default: return "conv_fprop_sm90: only the identity, relu and relu6 epilogues are compiled";
  }
  // Those three save nothing or y; a z would have no kernel writing it.
  if (p.e.saved == kSavePreact) return "conv_fprop_sm90: saving the pre-activation z is not compiled";
  if (p.e.has_residual && p.residual_dtype != p.out_dtype) {
    return "conv_fprop_sm90: the residual must have y's dtype";
  }
  if (p.e.has_bias && p.bias_dtype != ffi::DataType::F32 && p.bias_dtype != ffi::DataType::BF16 &&
      p.bias_dtype != ffi::DataType::F16 && p.bias_dtype != ffi::DataType::F64) {
    return "conv_fprop_sm90: unsupported bias dtype";
  }
  if (g.batch == 0 || g.out_positions() == 0 || g.out_channels == 0) {
    pl->empty = true;
    return nullptr;
  }
  if (g.in_channels <= 0 || g.in_channels % 8 != 0 || g.out_channels % 8 != 0) {
    return "conv_fprop_sm90: C_in and C_out must be positive multiples of 8 (16-byte TMA strides)";
  }
  if (!FitsInt(g.batch) || !FitsInt(g.in_channels) || !FitsInt(g.out_channels)) {
    return "conv_fprop_sm90: sizes exceed int32";
  }
  pl->act[0] = int(g.batch);
  pl->act[4] = pl->flt[4] = int(g.in_channels);
  pl->flt[0] = int(g.out_channels);
  for (int k = 0; k < 3; ++k) {
    const int64_t eff = (g.window[k] - 1) * g.k_dilation[k] + 1;
    // CUTLASS derives out = 1 + (in + lo + hi - eff) / stride. The smallest
    // hi giving ours can be negative (a 1x1 stride-2 VALID conv on an even
    // size never reads the last input); CUTLASS refuses that, but any hi with
    // the same quotient is the same conv, so take the smallest one >= 0.
    const int64_t hi = std::max<int64_t>(0, (g.out[k] - 1) * g.stride[k] + eff - g.in[k] - g.pad_lo[k]);
    const int64_t span = g.in[k] + g.pad_lo[k] + hi - eff;
    if (g.in[k] < 1) return "conv_fprop_sm90: an empty input dim with a nonempty output";
    if (g.pad_lo[k] < 0 || span < 0 || 1 + span / g.stride[k] != g.out[k]) {
      return "conv_fprop_sm90: negative padding is not compiled";
    }
    if (!FitsInt(g.in[k]) || !FitsInt(g.window[k]) || !FitsInt(g.pad_lo[k]) || !FitsInt(hi) ||
        !FitsInt(g.stride[k]) || !FitsInt(g.k_dilation[k])) {
      return "conv_fprop_sm90: sizes exceed int32";
    }
    pl->act[1 + k] = int(g.in[k]);
    pl->flt[1 + k] = int(g.window[k]);
    pl->lo[k] = int(g.pad_lo[k]);
    pl->hi[k] = int(hi);
    pl->stride[k] = int(g.stride[k]);
    pl->dil[k] = int(g.k_dilation[k]);
  }
  if (g.taps() > 65535) return "conv_fprop_sm90: more than 65535 taps";
  pl->half = p.dtype == ffi::DataType::F16;
  pl->tile_n = TileN(g.out_channels);
  pl->weight_bytes = RoundUp(size_t(g.weights()) * 2);
  pl->bias_bytes = p.e.has_bias ? RoundUp(size_t(g.out_channels) * sizeof(float)) : 0;
  return nullptr;
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// fn<kHalf, kTileN>() for the plan's configuration.
template <template <bool, int> class Fn, class... Args>
auto Dispatch(const Plan& pl, Args&&... args) {
  if (pl.half) {
    return pl.tile_n == 64 ? Fn<true, 64>::Call(args...) : Fn<true, 128>::Call(args...);
  }
  return pl.tile_n == 64 ? Fn<false, 64>::Call(args...) : Fn<false, 128>::Call(args...);
}

template <bool H, int N>
struct WorkspaceOf {
  static size_t Call(const Plan& pl) { return sm90::CutlassWorkspace<H, N>(pl); }
};
template <bool H, int N>
struct ImplementableOf {
  static bool Call(const Plan& pl, float alpha, float beta) {
    return sm90::Implementable<H, N>(pl, alpha, beta);
  }
};
template <bool H, int N>
struct LaunchOf {
  template <class... A>
  static LaunchStatus Call(const A&... a) {
    return sm90::Launch<H, N>(a...);
  }
};

LaunchStatus Run(const ConvFwdArgs& p, const Plan& pl, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream) {
  const size_t cutlass_bytes = Dispatch<WorkspaceOf>(pl, pl);
  if (workspace_bytes < cutlass_bytes + pl.weight_bytes + pl.bias_bytes || workspace == nullptr) {
    return LaunchStatus::Refused("conv_fprop_sm90: workspace smaller than ConvFpropSm90Workspace");
  }
  const bool has_res = p.e.has_residual;
  if ((p.e.has_bias && p.bias == nullptr) || (has_res && p.residual == nullptr)) {
    return LaunchStatus::Refused("conv_fprop_sm90: bias or residual flagged but null");
  }
  if (!Aligned16(workspace) || !Aligned16(p.x) || !Aligned16(p.y) || (has_res && !Aligned16(p.residual))) {
    return LaunchStatus::Refused("conv_fprop_sm90: x, y, residual and workspace must be 16-byte aligned");
  }
  // Without a residual, beta = 0 keeps C unread (CUTLASS skips its loads);
  // y stands in as C so that C's TMA descriptor is still a valid one.
  const float beta = has_res ? p.e.beta : 0.0f;
  if (!Dispatch<ImplementableOf>(pl, pl, p.e.alpha, beta)) {
    return LaunchStatus::Refused(
        "conv_fprop_sm90: outside CUTLASS's 3-D im2col TMA limits (per dim: padding <= 16, "
        "(window - 1) * dilation <= min(30, 16 + high padding); output positions < 2^31)");
  }
  char* ws = static_cast<char*>(workspace);
  void* wt = ws + cutlass_bytes;
  float* bias = p.e.has_bias ? reinterpret_cast<float*>(ws + cutlass_bytes + pl.weight_bytes) : nullptr;
  const int taps = int(p.g.taps()), cin = pl.act[4], cout = pl.flt[0];
  const cudaError_t err =
      sm90::PackWeightsKMajor(p.w, wt, taps, cin, cout, p.bias, p.bias_dtype, bias, stream);
  if (err != cudaSuccess) return err;
  void* cutlass_ws = cutlass_bytes > 0 ? workspace : nullptr;
  const void* c = has_res ? p.residual : p.y;
  return Dispatch<LaunchOf>(pl, pl, p.e.alpha, beta, p.x, static_cast<const void*>(wt),
                            static_cast<const float*>(bias), c, p.y, cutlass_ws, stream);
}

}  // namespace

const char* ConvFpropSm90Refusal(const ConvFwdArgs& p) {
  Plan pl;
  if (const char* why = MakePlan(p, &pl)) return why;
  if (pl.empty) return nullptr;
  const float beta = p.e.has_residual ? p.e.beta : 0.0f;
  if (!Dispatch<ImplementableOf>(pl, pl, p.e.alpha, beta)) {
    return "conv_fprop_sm90: outside CUTLASS's 3-D im2col TMA limits";
  }
  return nullptr;
}

int ConvFpropSm90TileN(const ConvFwdArgs& p) { return TileN(p.g.out_channels); }

size_t ConvFpropSm90Workspace(const ConvFwdArgs& p) {
  Plan pl;
  if (MakePlan(p, &pl) != nullptr || pl.empty) return 0;
  return Dispatch<WorkspaceOf>(pl, pl) + pl.weight_bytes + pl.bias_bytes;
}

LaunchStatus ConvFpropSm90(const ConvFwdArgs& p, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  Plan pl;
  if (const char* why = MakePlan(p, &pl)) return LaunchStatus::Refused(why);
  if (pl.empty) return cudaSuccess;
  return Run(p, pl, workspace, workspace_bytes, stream);
}

}  // namespace jaxdnn::conv
