// The activations jaxdnn fuses (bias_act, glu, the CNN norms), shared by the
// CPU and CUDA kernels, in float32 with jax.nn's definitions, including where NaN goes:
// Apply(x) is the function, Backprop(x, g) the gradient g * f'(x) as JAX
// differentiates jax.nn's definition (relu's select gives 0, not NaN, for
// x <= 0 whatever g is).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/host_device.h"

namespace jaxdnn {

// Codes shared with jaxdnn/activations/kinds.py.
enum class Act : int32_t {
  kIdentity = 0,
  kRelu = 1,
  kRelu6 = 2,
  kGeluErf = 3,
  kGeluTanh = 4,
  kSilu = 5,
  kSigmoid = 6,
  kTanh = 7,
  kElu = 8,
  kSoftplus = 9,
  kLeakyRelu = 10,
  kSquaredRelu = 11,
};
constexpr int32_t kNumActs = 12;

// `param` is leaky_relu's negative slope and elu's alpha; unused otherwise.
// NaN stays NaN through every function, as XLA's max/min do.
template <Act A>
JAXDNN_HD float Apply(float x, float param) {
  constexpr float kSqrtHalf = 0.70710678118654752f, kTanhC = 0.79788456080286536f;  // sqrt(1/2), sqrt(2/pi)
  if constexpr (A == Act::kIdentity) return x;
  if constexpr (A == Act::kRelu) return x > 0.0f || x != x ? x : 0.0f;
  if constexpr (A == Act::kRelu6) return x != x ? x : (x > 6.0f ? 6.0f : (x > 0.0f ? x : 0.0f));
  if constexpr (A == Act::kGeluErf) return 0.5f * x * erfcf(-x * kSqrtHalf);
  if constexpr (A == Act::kGeluTanh) return 0.5f * x * (1.0f + tanhf(kTanhC * (x + 0.044715f * x * x * x)));
  if constexpr (A == Act::kSilu) return x / (1.0f + expf(-x));
  if constexpr (A == Act::kSigmoid) return 1.0f / (1.0f + expf(-x));
  if constexpr (A == Act::kTanh) return tanhf(x);
  if constexpr (A == Act::kElu) return x > 0.0f ? x : param * expm1f(x);
  if constexpr (A == Act::kSoftplus) return (x > 0.0f ? x : 0.0f) + log1pf(expf(-fabsf(x)));
  if constexpr (A == Act::kLeakyRelu) return x >= 0.0f ? x : param * x;
  if constexpr (A == Act::kSquaredRelu) return x > 0.0f || x != x ? x * x : 0.0f;
  return x;
}

template <Act A>
JAXDNN_HD float Backprop(float x, float g, float param) {
  constexpr float kSqrtHalf = 0.70710678118654752f, kTanhC = 0.79788456080286536f;
  constexpr float kInvSqrt2Pi = 0.39894228040143268f;
  if constexpr (A == Act::kIdentity) return g;
  if constexpr (A == Act::kRelu) return x > 0.0f ? g : 0.0f;
  if constexpr (A == Act::kRelu6) return x > 0.0f && x < 6.0f ? g : 0.0f;
  if constexpr (A == Act::kGeluErf) {
    return g * (0.5f * erfcf(-x * kSqrtHalf) + x * kInvSqrt2Pi * expf(-0.5f * x * x));
  }
  if constexpr (A == Act::kGeluTanh) {
    const float t = tanhf(kTanhC * (x + 0.044715f * x * x * x));
    return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kTanhC * (1.0f + 3.0f * 0.044715f * x * x));
  }
  if constexpr (A == Act::kSilu) {
    const float s = 1.0f / (1.0f + expf(-x));
    return g * s * (1.0f + x * (1.0f - s));
  }
  if constexpr (A == Act::kSigmoid) {
    const float s = 1.0f / (1.0f + expf(-x));
    return g * s * (1.0f - s);
  }
  if constexpr (A == Act::kTanh) {
    const float t = tanhf(x);
    return g * (1.0f - t * t);
  }
  if constexpr (A == Act::kElu) return x > 0.0f ? g : g * param * expf(x);
  if constexpr (A == Act::kSoftplus) return g / (1.0f + expf(-x));
  if constexpr (A == Act::kLeakyRelu) return x >= 0.0f ? g : g * param;
  if constexpr (A == Act::kSquaredRelu) return x > 0.0f ? 2.0f * x * g : 0.0f;
  return g;
}

// f(x) for a runtime code (one kernel instantiation serves every
// activation); an unknown code is the identity.
JAXDNN_HD float ApplyCode(int32_t act, float x, float param) {
  switch (static_cast<Act>(act)) {
    case Act::kRelu: return Apply<Act::kRelu>(x, param);
    case Act::kRelu6: return Apply<Act::kRelu6>(x, param);
    case Act::kGeluErf: return Apply<Act::kGeluErf>(x, param);
    case Act::kGeluTanh: return Apply<Act::kGeluTanh>(x, param);
    case Act::kSilu: return Apply<Act::kSilu>(x, param);
    case Act::kSigmoid: return Apply<Act::kSigmoid>(x, param);
    case Act::kTanh: return Apply<Act::kTanh>(x, param);
    case Act::kElu: return Apply<Act::kElu>(x, param);
    case Act::kSoftplus: return Apply<Act::kSoftplus>(x, param);
    case Act::kLeakyRelu: return Apply<Act::kLeakyRelu>(x, param);
    case Act::kSquaredRelu: return Apply<Act::kSquaredRelu>(x, param);
    default: return x;
  }
}

// fn(std::integral_constant<Act, A>{}) for the runtime code `act`; false for
// a code with no activation.
template <typename Fn>
JAXDNN_HD bool ByAct(int32_t act, Fn&& fn) {
  switch (static_cast<Act>(act)) {
#define JAXDNN_ACT_CASE(A) \
  case A: fn(std::integral_constant<Act, A>{}); return true;
    JAXDNN_ACT_CASE(Act::kIdentity)
    JAXDNN_ACT_CASE(Act::kRelu)
    JAXDNN_ACT_CASE(Act::kRelu6)
    JAXDNN_ACT_CASE(Act::kGeluErf)
    JAXDNN_ACT_CASE(Act::kGeluTanh)
    JAXDNN_ACT_CASE(Act::kSilu)
    JAXDNN_ACT_CASE(Act::kSigmoid)
    JAXDNN_ACT_CASE(Act::kTanh)
    JAXDNN_ACT_CASE(Act::kElu)
    JAXDNN_ACT_CASE(Act::kSoftplus)
    JAXDNN_ACT_CASE(Act::kLeakyRelu)
    JAXDNN_ACT_CASE(Act::kSquaredRelu)
#undef JAXDNN_ACT_CASE
  }
  return false;
}

}  // namespace jaxdnn
