// cp.async (sm_80+): 16-byte global -> shared copies that complete in the
// background, in commit groups the issuing thread waits on. Both the
// attention tiles and the norms' row ring are fed through these.
#pragma once

#include <cstdint>

#include "common/smem_addr.cuh"

namespace jaxdnn {

// 16 bytes global -> shared; `bytes` < 16 zero-fills the rest (0: all zeros).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(smem)), "l"(gmem),
               "r"(bytes));
}
// 16 bytes global -> shared through L1 (.ca): for rows other copies of the
// same CTA read again soon (a convolution window's overlapping taps); only
// for data no other CTA writes while the kernel runs.
__device__ __forceinline__ void CpAsync16L1(void* smem, const void* gmem, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(smem)), "l"(gmem),
               "r"(bytes));
}
// 4 bytes global -> shared through L1 (.ca: only for data no other CTA
// writes while the kernel runs); `bytes` 0 writes a zero.
__device__ __forceinline__ void CpAsync4(void* smem, const void* gmem, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(SmemAddr(smem)), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's commit groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
// Waits for every copy this thread issued.
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::); }

}  // namespace jaxdnn
