// Hopper bulk copies (cp.async.bulk, the TMA engine's 1-D form) from global
// to shared memory, completing on an mbarrier. One thread issues a whole row;
// the other threads only wait on the barrier's phase.
#pragma once

#include <cstdint>

namespace jaxdnn {

__device__ inline uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ inline void BarrierInit(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddr(bar)), "r"(count));
}

// Makes the initialized barriers visible to the copy engine.
__device__ inline void BarrierInitFence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Shared memory last read through ordinary loads is about to be overwritten
// by the copy engine (the async proxy).
__device__ inline void AsyncProxyFence() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ inline void BarrierExpectBytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SmemAddr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ inline void BulkLoad(void* smem, const void* gmem, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          SmemAddr(smem)),
      "l"(gmem), "r"(bytes), "r"(SmemAddr(bar))
      : "memory");
}

__device__ inline void BarrierWait(uint64_t* bar, uint32_t phase) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(SmemAddr(bar)),
      "r"(phase)
      : "memory");
}

}  // namespace jaxdnn
