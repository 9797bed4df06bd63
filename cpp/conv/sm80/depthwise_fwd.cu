// The depthwise forward's channel-vector direct loop (depthwise_fwd.h).
#include "conv/sm80/depthwise_fwd.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "common/activation.h"
#include "common/cuda_vec.cuh"

namespace jaxdnn::conv {
namespace {

struct DwParams {
  const void* x;
  const void* w;
  const void* bias;
  const void* residual;
  void* y;
  void* z;
  int64_t total;  // N * out positions * channel vectors
  int64_t channels;
  int cvecs;  // channel vectors a position
  int in[3], out[3], window[3], stride[3], in_dil[3], k_dil[3], pad_lo[3];
  int bias_dtype, save_z;
  float act_param, alpha, beta;
};

// One bias element of any float dtype (ffi::DataType code), as float32.
__device__ float BiasAt(const void* b, int dtype, int64_t c) {
  switch (static_cast<ffi::DataType>(dtype)) {
    case ffi::DataType::F32: return __ldg(static_cast<const float*>(b) + c);
    case ffi::DataType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(b)[c]);
    case ffi::DataType::F16: return __half2float(static_cast<const __half*>(b)[c]);
    default: return 0.0f;
  }
}

// E values of OT at p (16-byte aligned) to and from float32.
template <typename OT, int E>
__device__ void LoadOut(const OT* p, float* f) {
  constexpr int kPer = Vec16<OT>::kElems;
#pragma unroll
  for (int v = 0; v < E / kPer; ++v)
    Vec16<OT>::Unpack(__ldg(reinterpret_cast<const uint4*>(p) + v), f + v * kPer);
}
template <typename OT, int E>
__device__ void StoreOut(OT* p, const float* f) {
  constexpr int kPer = Vec16<OT>::kElems;
#pragma unroll
  for (int v = 0; v < E / kPer; ++v) reinterpret_cast<uint4*>(p)[v] = Vec16<OT>::Pack(f + v * kPer);
}

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
    const int64_t yi = position * p.channels + int64_t(cv) * E;
    float res[E];
    if (p.residual != nullptr) {
      LoadOut<OT, E>(static_cast<const OT*>(p.residual) + yi, res);
    }
    float zf[E], yf[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      float v = p.alpha * acc[e];
      if (p.bias != nullptr) v += BiasAt(p.bias, p.bias_dtype, int64_t(cv) * E + e);
      if (p.residual != nullptr) v += p.beta * res[e];
      zf[e] = v;
      yf[e] = Apply<A>(v, p.act_param);
    }
    StoreOut<OT, E>(static_cast<OT*>(p.y) + yi, yf);
    if (p.save_z) StoreOut<OT, E>(static_cast<OT*>(p.z) + yi, zf);
  }
}

int VecOf(ffi::DataType t) { return t == ffi::DataType::F32 ? 4 : 8; }

bool IsFloat(ffi::DataType t) {
  return t == ffi::DataType::F32 || t == ffi::DataType::BF16 || t == ffi::DataType::F16;
}

bool Aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The kernel for the call's activation (ByAct: one instantiation each).
template <typename T, typename OT>
LaunchStatus Launch(const DwParams& params, int32_t act, cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>((params.total + 255) / 256, int64_t(1) << 20);
  const bool known = ByAct(act, [&](auto a) {
    DepthwiseFwdKernel<T, OT, decltype(a)::value><<<unsigned(blocks), 256, 0, stream>>>(params);
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
  if (!IsFloat(p.dtype)) return "depthwise_fwd: x and w must be float32, bfloat16 or float16";
  if (p.out_dtype != p.dtype && p.out_dtype != ffi::DataType::F32)
    return "depthwise_fwd: the output dtype must be x's or float32";
  if (p.g.in_channels % VecOf(p.dtype) != 0)
    return "depthwise_fwd: the channels must be a multiple of 8 (16-bit) or 4 (float32)";
  if (p.e.has_bias && !IsFloat(p.bias_dtype)) return "depthwise_fwd: the bias must be a float dtype";
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

LaunchStatus DepthwiseFwdCuda(const ConvFwdArgs& p, cudaStream_t stream) {
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
  d.channels = p.g.in_channels;
  d.cvecs = int(p.g.in_channels / VecOf(p.dtype));
  d.total = p.g.batch * p.g.out_positions() * d.cvecs;
  for (int k = 0; k < 3; ++k) {
    d.in[k] = int(p.g.in[k]);
    d.out[k] = int(p.g.out[k]);
    d.window[k] = int(p.g.window[k]);
    d.stride[k] = int(p.g.stride[k]);
    d.in_dil[k] = int(p.g.in_dilation[k]);
    d.k_dil[k] = int(p.g.k_dilation[k]);
    d.pad_lo[k] = int(p.g.pad_lo[k]);
  }
  d.act_param = p.e.act_param;
  d.alpha = p.e.alpha;
  d.beta = p.e.beta;
  d.bias_dtype = static_cast<int>(p.bias_dtype);
  if (d.total == 0) return cudaSuccess;
  const bool wide = p.out_dtype == ffi::DataType::F32;
  switch (p.dtype) {
    case ffi::DataType::F32: return Launch<float, float>(d, p.e.act, stream);
    case ffi::DataType::BF16:
      return wide ? Launch<__nv_bfloat16, float>(d, p.e.act, stream)
                  : Launch<__nv_bfloat16, __nv_bfloat16>(d, p.e.act, stream);
    case ffi::DataType::F16:
      return wide ? Launch<__half, float>(d, p.e.act, stream) : Launch<__half, __half>(d, p.e.act, stream);
    default: return LaunchStatus::Refused("depthwise_fwd: x and w must be float32, bfloat16 or float16");
  }
}

}  // namespace jaxdnn::conv
