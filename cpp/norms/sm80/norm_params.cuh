// Parameter loads and parameter-gradient stores of the CUDA norms. scale and
// bias are float32, or (`params16`, a kernel argument, so the branch is
// uniform over the grid) in x's 16-bit dtype T; they are converted to float32
// in registers as they load, so no convert kernel runs before a norm. Every
// kernel's parameter access goes through these helpers. Only the final
// dscale/dbias write converts back (StoreParamGrad); the backward's partials
// stay float32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_vec.cuh"
#include "norms/problem.h"

namespace jaxdnn::norms {

__device__ inline float ToF32(float v) { return v; }
__device__ inline float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float ToF32(__half v) { return __half2float(v); }
template <typename T>
__device__ inline T FromF32(float v);
template <>
__device__ inline float FromF32<float>(float v) {
  return v;
}
template <>
__device__ inline __nv_bfloat16 FromF32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ inline __half FromF32<__half>(float v) {
  return __float2half_rn(v);
}

// Two packed 16-bit values as float32.
__device__ inline float2 PairToF32(uint32_t u, const __nv_bfloat16*) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
}
__device__ inline float2 PairToF32(uint32_t u, const __half*) {
  return __half22float2(*reinterpret_cast<const __half2*>(&u));
}

// Calls fn(std::true_type{}) where the parameters are 16-bit, else
// fn(std::false_type{}): one grid-uniform branch around a block of parameter
// loads, whose two copies each load one width. The phase-grouped kernels load
// their parameters once into registers this way, and the stream forward's
// second sweep: with a branch at each load, ptxas took the 16-bit LayerNorm
// NormFwdPhasedKernel<.., 2> from 64 to 90-96 registers and the stream forward
// from 44 to 54. The row kernels (NormFwdVecKernel, NormFwdPairKernel,
// NormBwdRingKernel, NormBwdStreamKernel) branch at each load instead: with
// their loops copied they spilled more at their register budgets (ptxas -v,
// sm_90a).
// float32 rows only ever have float32 parameters: one copy.
template <typename T, typename Fn>
__device__ __forceinline__ void ByParamDtype(bool params16, Fn&& fn) {
  if constexpr (sizeof(T) == 2) {
    if (params16) {
      fn(std::true_type{});
      return;
    }
  }
  fn(std::false_type{});
}

// Parameters `c`..`c + 3` of a parameter array (c a multiple of 4, the
// column of a row's 16-byte vector plus its group's offset): one 16-byte load
// of float32, or with params16 one 8-byte load of four T. kKeep: with an L1
// evict-last hint (LoadParamKeep). The launcher checks the array's alignment
// (16 bytes for float32, 8 for 16-bit) before it picks a kernel that calls
// this. P: bool, or std::bool_constant inside ByParamDtype.
template <typename T, bool kKeep = false, typename P = bool>
__device__ __forceinline__ float4 LoadParam4(const void* params, int64_t c, P params16) {
  if constexpr (sizeof(T) == 2) {
    if (params16) {
      const T* p = static_cast<const T*>(params) + c;
      uint2 r;
      if constexpr (kKeep) {
        asm volatile("ld.global.nc.L1::evict_last.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
      } else {
        r = __ldg(reinterpret_cast<const uint2*>(p));
      }
      const float2 lo = PairToF32(r.x, p), hi = PairToF32(r.y, p);
      return make_float4(lo.x, lo.y, hi.x, hi.y);
    }
  }
  const float* p = static_cast<const float*>(params) + c;
  return kKeep ? LoadParamKeep(p) : LoadParam(p);
}

// Parameter `c`, of any alignment.
template <typename T, typename P = bool>
__device__ __forceinline__ float LoadParam1(const void* params, int64_t c, P params16) {
  if constexpr (sizeof(T) == 2) {
    if (params16) return ToF32(__ldg(static_cast<const T*>(params) + c));
  }
  return __ldg(static_cast<const float*>(params) + c);
}

// Writes the float32 gradient `v` of parameter `c` in the parameters' dtype:
// float32, or with params16 x's dtype `dtype` (rounded once, to nearest even).
// The reduction kernel that calls it is not typed by x's dtype, so the
// 16-bit type is a run-time argument here.
__device__ inline void StoreParamGrad(void* grads, int64_t c, float v, bool params16, ffi::DataType dtype) {
  if (!params16) {
    static_cast<float*>(grads)[c] = v;
  } else if (dtype == ffi::DataType::BF16) {
    static_cast<__nv_bfloat16*>(grads)[c] = __float2bfloat16_rn(v);
  } else {
    static_cast<__half*>(grads)[c] = __float2half_rn(v);
  }
}

// Whether a parameter array suits LoadParam4: 16-byte aligned float32, or
// 8-byte aligned 16-bit values (four of them per load). Null (RMSNorm's bias)
// passes.
inline bool ParamsAligned(const void* p, bool params16) {
  return (reinterpret_cast<uintptr_t>(p) & (params16 ? 7u : 15u)) == 0;
}

}  // namespace jaxdnn::norms
