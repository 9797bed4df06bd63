// The 32-bit shared-memory address of a generic pointer, as PTX shared-space
// operands (cp.async, ldmatrix, mbarrier, TMA) take it.
#pragma once

#include <cstdint>

namespace jaxdnn {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace jaxdnn
