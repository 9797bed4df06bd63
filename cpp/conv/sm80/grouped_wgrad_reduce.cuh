// The grouped weight gradients' last step (grouped_wgrad.cu,
// grouped_tiled_wgrad.cu): dw = alpha * the sum of the float32 partials, in
// order (deterministic), and the bias gradient's likewise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "common/cuda_vec.cuh"
#include "common/launch_status.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

// partials [groups, slices, wk, out_group]; bias_partials [groups, slices,
// out_group] or null.
template <typename T>
__global__ void __launch_bounds__(256)
    GroupedWgradReduce(const float* partials, const float* bias_partials, int64_t slices, int64_t wk,
                       int out_group, int64_t out_channels, float alpha, T* dw, void* dbias, int bias_dtype) {
  const int64_t total = wk * out_channels;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total + out_channels;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (i < total) {
      const int64_t k = i / out_channels, co = i % out_channels;
      const int64_t g = co / out_group, n = co % out_group;
      const float* src = partials + (g * slices * wk + k) * out_group + n;
      float s = 0.0f;
      for (int64_t sl = 0; sl < slices; ++sl) s += src[sl * wk * out_group];
      Vec16<T>::Store1(dw + i, alpha * s);
    } else if (bias_partials != nullptr) {
      const int64_t co = i - total, g = co / out_group, n = co % out_group;
      const float* src = bias_partials + g * slices * out_group + n;
      float s = 0.0f;
      for (int64_t sl = 0; sl < slices; ++sl) s += src[sl * out_group];
      switch (static_cast<ffi::DataType>(bias_dtype)) {
        case ffi::DataType::F32: static_cast<float*>(dbias)[co] = s; break;
        case ffi::DataType::BF16: static_cast<__nv_bfloat16*>(dbias)[co] = __float2bfloat16(s); break;
        case ffi::DataType::F16: static_cast<__half*>(dbias)[co] = __float2half(s); break;
        default: break;
      }
    }
  }
}

// Enqueues the reduction into p.dw (and p.dbias).
inline LaunchStatus LaunchGroupedWgradReduce(const ConvWgradArgs& p, const float* partials,
                                             const float* bias_partials, int64_t slices,
                                             cudaStream_t stream) {
  const int64_t wk = p.g.taps() * p.g.cin_g();
  const int64_t total = wk * p.g.out_channels + p.g.out_channels;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 4096);
  if (p.dtype == ffi::DataType::BF16)
    GroupedWgradReduce<__nv_bfloat16><<<unsigned(blocks), 256, 0, stream>>>(
        partials, bias_partials, slices, wk, int(p.g.cout_g()), p.g.out_channels, p.e.alpha,
        static_cast<__nv_bfloat16*>(p.dw), p.dbias, static_cast<int>(p.bias_dtype));
  else
    GroupedWgradReduce<__half><<<unsigned(blocks), 256, 0, stream>>>(
        partials, bias_partials, slices, wk, int(p.g.cout_g()), p.g.out_channels, p.e.alpha,
        static_cast<__half*>(p.dw), p.dbias, static_cast<int>(p.bias_dtype));
  return cudaGetLastError();
}

}  // namespace jaxdnn::conv
