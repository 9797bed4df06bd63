// cp.async (16-byte, L1-bypassing) copies from global to shared memory, for
// kernels that prefetch the rows they will need next while they compute.
#pragma once

#include <cstdint>

namespace jaxdnn {

__device__ inline void AsyncCopy16(void* smem, const void* gmem) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
}

__device__ inline void AsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most `kPending` of this thread's committed groups are in flight.
template <int kPending>
__device__ inline void AsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace jaxdnn
