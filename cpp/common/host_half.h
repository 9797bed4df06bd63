// Bit-exact float <-> bfloat16 / float16 conversions for the CPU kernels.
// Round-to-nearest-even, NaN kept quiet, overflow to infinity: the same
// rounding XLA applies when it narrows a float32 result.
#pragma once

#include <cstdint>
#include <cstring>

namespace jaxdnn {

struct bf16_t {
  uint16_t bits;
};
struct f16_t {
  uint16_t bits;
};

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float ToFloat(float v) { return v; }
inline float ToFloat(bf16_t v) { return BitsFloat(uint32_t(v.bits) << 16); }

inline float ToFloat(f16_t v) {
  const uint32_t sign = uint32_t(v.bits & 0x8000u) << 16;
  uint32_t exp = (v.bits >> 10) & 0x1fu;
  uint32_t man = v.bits & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return BitsFloat(sign);
    // Subnormal half: renormalise into a float32 normal.
    int shift = 0;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      ++shift;
    }
    man &= 0x3ffu;
    return BitsFloat(sign | uint32_t(113 - shift) << 23 | (man << 13));
  }
  return BitsFloat(sign | (exp + 112) << 23 | (man << 13));
}

template <typename T>
T FromFloat(float f);

template <>
inline float FromFloat<float>(float f) {
  return f;
}

template <>
inline bf16_t FromFloat<bf16_t>(float f) {
  // Branch-free (a select), so row loops vectorize.
  const uint32_t u = FloatBits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return bf16_t{uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}

template <>
inline f16_t FromFloat<f16_t>(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16_t{uint16_t(sign | 0x7e00u)};   // NaN
  if (abs >= 0x477ff000u) return f16_t{uint16_t(sign | 0x7c00u)};  // rounds to inf
  if (abs < 0x38800000u) {                                         // half subnormal or zero
    // Adding 0.5 makes the FPU do the round-to-nearest-even at the 2^-24 grid.
    const float scaled = BitsFloat(abs) + 0.5f;
    return f16_t{uint16_t(sign | (FloatBits(scaled) - 0x3f000000u))};
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return f16_t{uint16_t(sign | ((rounded - 0x38000000u) >> 13))};
}

}  // namespace jaxdnn
