// What the depthwise forward's kernels share (depthwise_fwd.cu,
// depthwise_tiled.cuh): the launch parameters and the epilogue that turns one
// channel vector's float32 sums into y (and z).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/activation.h"
#include "common/cuda_vec.cuh"
#include "common/ffi_util.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

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
__device__ inline float BiasAt(const void* b, int dtype, int64_t c) {
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

// Elements of a 16-byte channel vector: 4 float32, 8 16-bit.
inline int DwVecOf(ffi::DataType t) { return t == ffi::DataType::F32 ? 4 : 8; }

inline bool Aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline bool DwIsFloat(ffi::DataType t) {
  return t == ffi::DataType::F32 || t == ffi::DataType::BF16 || t == ffi::DataType::F16;
}

// The geometric fields of d from g, channel vectors of `vec` elements.
inline void SetDwGeometry(const ConvGeometry& g, int vec, DwParams& d) {
  d.channels = g.in_channels;
  d.cvecs = int(g.in_channels / vec);
  d.total = g.batch * g.out_positions() * d.cvecs;
  for (int k = 0; k < 3; ++k) {
    d.in[k] = int(g.in[k]);
    d.out[k] = int(g.out[k]);
    d.window[k] = int(g.window[k]);
    d.stride[k] = int(g.stride[k]);
    d.in_dil[k] = int(g.in_dilation[k]);
    d.k_dil[k] = int(g.k_dilation[k]);
    d.pad_lo[k] = int(g.pad_lo[k]);
  }
}

// A 16-byte vector of T as float32. bfloat16 by a shift and a mask a pair:
// cuda_bf16's conversion spends three integer ops a pair, and the unpacking
// was a third of the tiled kernel's instructions (Nsight Compute,
// docs/perf/conv.md).
template <typename T>
__device__ __forceinline__ void UnpackFast(const uint4& r, float* f) {
  Vec16<T>::Unpack(r, f);
}
template <>
__device__ __forceinline__ void UnpackFast<__nv_bfloat16>(const uint4& r, float* f) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// y (and z) of one channel vector at element yi from its E float32 sums:
// activation(alpha * acc + bias + beta * residual).
template <typename OT, int E, Act A>
__device__ void FinishVector(const DwParams& p, int64_t yi, int64_t c0, const float* acc) {
  float res[E];
  if (p.residual != nullptr) LoadOut<OT, E>(static_cast<const OT*>(p.residual) + yi, res);
  float zf[E], yf[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    float v = p.alpha * acc[e];
    if (p.bias != nullptr) v += BiasAt(p.bias, p.bias_dtype, c0 + e);
    if (p.residual != nullptr) v += p.beta * res[e];
    zf[e] = v;
    yf[e] = Apply<A>(v, p.act_param);
  }
  StoreOut<OT, E>(static_cast<OT*>(p.y) + yi, yf);
  if (p.save_z) StoreOut<OT, E>(static_cast<OT*>(p.z) + yi, zf);
}

}  // namespace jaxdnn::conv
