// Helpers shared by the standalone CUDA self-tests (attention, convolution):
// a checked CUDA call, 16-bit loads for the reference kernels, the fixed-seed
// host RNG that draws inputs uniform in [-1, 1] (never zero through
// RandomBits), and host conversions to and from 16-bit storage.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/launch_status.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK_CUDA(x)                                                                                  \
  do {                                                                                                 \
    const auto e_ = (x); /* a cudaError_t or a launcher's LaunchStatus */                              \
    if (!::jaxdnn::LaunchOk(e_)) {                                                                     \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", ::jaxdnn::LaunchText(e_).c_str(), __FILE__, \
                   __LINE__, #x);                                                                      \
      std::exit(2);                                                                                    \
    }                                                                                                  \
  } while (0)

namespace sm90_selftest {

template <typename T>
__device__ __forceinline__ float ToF(T x);
template <>
__device__ __forceinline__ float ToF(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float ToF(__half x) {
  return __half2float(x);
}

inline uint64_t g_rng = 0x9E3779B97F4A7C15ull;

inline uint64_t NextBits() {  // xorshift64*
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545F4914F6CDD1Dull;
}
inline float NextUniform() {  // uniform in [-1, 1]
  return static_cast<float>((NextBits() >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
}
inline int NextInt(int lo, int hi) {
  return lo + static_cast<int>((NextBits() >> 33) % uint64_t(hi - lo + 1));
}

// n bf16 (or f16) values as raw bits, uniform in [-1, 1], none of them zero.
inline std::vector<uint16_t> RandomBits(size_t n, bool f16) {
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t bits = 0;
    do {
      const float x = NextUniform();
      if (f16) {
        __half hv = __float2half_rn(x);
        std::memcpy(&bits, &hv, 2);
      } else {
        __nv_bfloat16 bv = __float2bfloat16_rn(x);
        std::memcpy(&bits, &bv, 2);
      }
    } while ((bits & 0x7FFF) == 0);
    out[i] = bits;
  }
  return out;
}

inline float HostToF(uint16_t bits, bool f16) {
  if (f16) {
    __half h;
    std::memcpy(&h, &bits, 2);
    return __half2float(h);
  }
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// v rounded to float16 (f16) or bfloat16, as raw bits.
inline uint16_t HostFromF(float v, bool f16) {
  uint16_t bits;
  if (f16) {
    const __half h = __float2half_rn(v);
    std::memcpy(&bits, &h, 2);
  } else {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    std::memcpy(&bits, &h, 2);
  }
  return bits;
}

}  // namespace sm90_selftest
