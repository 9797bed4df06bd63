// The depthwise forward (depthwise_fwd.h): the tiled kernel where it serves
// (depthwise_tiled.cuh), else the channel-vector direct loop below.
#include "conv/sm80/depthwise_fwd.h"

#include <algorithm>
#include <cstdint>

#include "common/switches.h"
#include "conv/sm80/depthwise_common.cuh"
#include "conv/sm80/depthwise_tiled.cuh"

namespace jaxdnn::conv {
namespace {

template <typename T, typename OT, Act A>
__global__ void __launch_bounds__(256) DepthwiseFwdKernel(DwParams p) {
  using V = Vec16<T>;
  constexpr int E = V::kElems;
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int cv = int(i % p.cvecs);
    const int64_t position = i / p.cvecs;  // n * out positions + (od, oh, ow)
    int64_t rest = position;
    const int ow = int(rest % p.out[2]);
    rest /= p.out[2];
    const int oh = int(rest % p.out[1]);
    rest /= p.out[1];
    const int od = int(rest % p.out[0]);
    const int64_t n = rest / p.out[0];
    float acc[E];
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = 0.0f;
    for (int kd = 0; kd < p.window[0]; ++kd) {
      const int pd = od * p.stride[0] - p.pad_lo[0] + kd * p.k_dil[0];
      if (pd < 0 || pd % p.in_dil[0] != 0 || pd / p.in_dil[0] >= p.in[0]) continue;
      const int id = pd / p.in_dil[0];
      for (int kh = 0; kh < p.window[1]; ++kh) {
        const int ph = oh * p.stride[1] - p.pad_lo[1] + kh * p.k_dil[1];
        if (ph < 0 || ph % p.in_dil[1] != 0 || ph / p.in_dil[1] >= p.in[1]) continue;
        const int ih = ph / p.in_dil[1];
        for (int kw = 0; kw < p.window[2]; ++kw) {
          const int pw = ow * p.stride[2] - p.pad_lo[2] + kw * p.k_dil[2];
          if (pw < 0 || pw % p.in_dil[2] != 0 || pw / p.in_dil[2] >= p.in[2]) continue;
          const int iw = pw / p.in_dil[2];
          const int64_t xi =
              (((n * p.in[0] + id) * p.in[1] + ih) * p.in[2] + iw) * p.channels + int64_t(cv) * E;
          const int64_t wi =
              ((int64_t(kd) * p.window[1] + kh) * p.window[2] + kw) * p.channels + int64_t(cv) * E;
          float xf[E], wf[E];
          V::Unpack(__ldg(reinterpret_cast<const uint4*>(x + xi)), xf);
          V::Unpack(__ldg(reinterpret_cast<const uint4*>(w + wi)), wf);
#pragma unroll
          for (int e = 0; e < E; ++e) acc[e] = fmaf(xf[e], wf[e], acc[e]);
        }
      }
    }
    FinishVector<OT, E, A>(p, position * p.channels + int64_t(cv) * E, int64_t(cv) * E, acc);
  }
}

// The tiled kernel (errors left for cudaGetLastError).
template <typename T, typename OT, Act A, int kW>
void LaunchTiled(const DwParams& params, const DwTile& tile, cudaStream_t stream) {
  // Over 48 KiB of dynamic shared memory needs the kernel's opt-in (a
  // function attribute, not a stream operation: capture-safe).
  if (tile.smem > 48 * 1024 &&
      cudaFuncSetAttribute(DepthwiseFwdTiled<T, OT, A, kW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(tile.smem)) != cudaSuccess)
    return;
  DepthwiseFwdTiled<T, OT, A, kW>
      <<<dim3(unsigned(tile.grid_x), unsigned(tile.grid_y)), kDwThreads, tile.smem, stream>>>(params, tile);
}

// The kernel for the call's activation (ByAct: one instantiation each): the
// tiled one where `tile` is set, else the direct loop.
template <typename T, typename OT>
LaunchStatus Launch(const DwParams& params, const DwTile& tile, int32_t act, cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>((params.total + 255) / 256, int64_t(1) << 20);
  const bool known = ByAct(act, [&](auto a) {
    constexpr Act kA = decltype(a)::value;
    if (tile.ok()) {
      // 3-wide windows at stride 1 along W (3x3, 1x3, 3x3x3 layers) unpack
      // each patch vector of a row once.
      if (params.window[2] == 3 && tile.se[2] == 1) {
        LaunchTiled<T, OT, kA, 3>(params, tile, stream);
      } else {
        LaunchTiled<T, OT, kA, 0>(params, tile, stream);
      }
    } else {
      DepthwiseFwdKernel<T, OT, kA><<<unsigned(blocks), 256, 0, stream>>>(params);
    }
  });
  if (!known) return LaunchStatus::Refused("depthwise_fwd: unknown activation");
  return cudaGetLastError();
}

}  // namespace

bool IsDepthwise(const ConvGeometry& g) {
  return g.groups > 1 && g.in_channels == g.groups && g.out_channels == g.groups;
}

const char* DepthwiseFwdRefusal(const ConvFwdArgs& p) {
  if (!IsDepthwise(p.g)) return "depthwise_fwd: only depthwise convolutions (C_in == C_out == groups)";
  if (!DwIsFloat(p.dtype)) return "depthwise_fwd: x and w must be float32, bfloat16 or float16";
  if (p.out_dtype != p.dtype && p.out_dtype != ffi::DataType::F32)
    return "depthwise_fwd: the output dtype must be x's or float32";
  if (p.g.in_channels % DwVecOf(p.dtype) != 0)
    return "depthwise_fwd: the channels must be a multiple of 8 (16-bit) or 4 (float32)";
  if (p.e.has_bias && !DwIsFloat(p.bias_dtype)) return "depthwise_fwd: the bias must be a float dtype";
  if (p.e.has_residual && p.residual_dtype != p.out_dtype)
    return "depthwise_fwd: the residual must have the output's dtype";
  if (p.e.act < 0 || p.e.act >= kNumActs) return "depthwise_fwd: unknown activation";
  for (int k = 0; k < 3; ++k) {
    if (p.g.stride[k] < 1 || p.g.in_dilation[k] < 1 || p.g.k_dilation[k] < 1)
      return "depthwise_fwd: strides and dilations must be positive";
    if (p.g.in[k] >= (int64_t(1) << 30) || p.g.out[k] >= (int64_t(1) << 30) ||
        p.g.window[k] >= (int64_t(1) << 30))
      return "depthwise_fwd: a spatial size is too large";
  }
  return nullptr;
}

LaunchStatus DepthwiseFwdCuda(const ConvFwdArgs& p, cudaStream_t stream, DwKernel kernel) {
  if (const char* why = DepthwiseFwdRefusal(p)) return LaunchStatus::Refused(why);
  if (!Aligned16(p.x) || !Aligned16(p.w) || !Aligned16(p.y) || !Aligned16(p.z) || !Aligned16(p.residual))
    return LaunchStatus::Refused("depthwise_fwd: x, w, y, z and the residual must be 16-byte aligned");
  if (p.e.saved == kSavePreact && p.z == nullptr)
    return LaunchStatus::Refused("depthwise_fwd: the pre-activation output z is missing");
  DwParams d{};
  d.x = p.x;
  d.w = p.w;
  d.bias = p.e.has_bias ? p.bias : nullptr;
  d.residual = p.e.has_residual ? p.residual : nullptr;
  d.y = p.y;
  d.z = p.e.saved == kSavePreact ? p.z : nullptr;
  d.save_z = d.z != nullptr ? 1 : 0;
  SetDwGeometry(p.g, DwVecOf(p.dtype), d);
  d.act_param = p.e.act_param;
  d.alpha = p.e.alpha;
  d.beta = p.e.beta;
  d.bias_dtype = static_cast<int>(p.bias_dtype);
  if (d.total == 0) return cudaSuccess;
  DwTile tile;
  if (kernel == DwKernel::kTiled || (kernel == DwKernel::kAuto && SwitchText(Switch::kConvDwTiled) != "0")) {
    tile = ChooseDwTile(d);
    if (kernel == DwKernel::kTiled && !tile.ok())
      return LaunchStatus::Refused(
          "depthwise_fwd: the tiled kernel serves no input dilation nor patches over 48 KiB");
    if (tile.ok() && (tile.grid_x >= (int64_t(1) << 31) || tile.grid_y > 65535))
      return LaunchStatus::Refused("depthwise_fwd: too many tiles for one grid");
  }
  const bool wide = p.out_dtype == ffi::DataType::F32;
  const int32_t act = p.e.act;
  switch (p.dtype) {
    case ffi::DataType::F32: return Launch<float, float>(d, tile, act, stream);
    case ffi::DataType::BF16:
      return wide ? Launch<__nv_bfloat16, float>(d, tile, act, stream)
                  : Launch<__nv_bfloat16, __nv_bfloat16>(d, tile, act, stream);
    case ffi::DataType::F16:
      return wide ? Launch<__half, float>(d, tile, act, stream)
                  : Launch<__half, __half>(d, tile, act, stream);
    default: return LaunchStatus::Refused("depthwise_fwd: x and w must be float32, bfloat16 or float16");
  }
}

}  // namespace jaxdnn::conv
