// min(a, b) that is NaN when either operand is (PTX min.NaN, sm_80+):
// fminf returns the other operand, which would hide a NaN the result must carry.
#pragma once

namespace jaxdnn {

__device__ __forceinline__ float MinNaN(float a, float b) {
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

}  // namespace jaxdnn
