// The barrier setup every sm90 backward main kernel (dK/dV, dQ, fused) starts
// with.
#pragma once

#include "attention/sm90/backward_common.cuh"

namespace jaxdnn::attention::sm90 {

// Thread 0 initializes the pipeline's barriers - `once` for the operands
// loaded once (one arrival plus the TMA bytes), per ring stage `full`
// (full_arrivals) and `empty` (one arrival per consumer warp: 8), then
// whatever more_init adds - fences them and prefetches the four tensor maps;
// then the whole CTA waits for it.
template <int kStages, typename MoreInit>
__device__ __forceinline__ void InitBwdPipeline(uint64_t* once, uint64_t* full, int full_arrivals,
                                                uint64_t* empty, const CUtensorMap* tm_q,
                                                const CUtensorMap* tm_k, const CUtensorMap* tm_v,
                                                const CUtensorMap* tm_do, MoreInit more_init) {
  if (threadIdx.x == 0) {
    MbarInit(once, 1);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      MbarInit(&full[s], full_arrivals);
      MbarInit(&empty[s], 8);
    }
    more_init();
    FenceMbarInit();
    PrefetchTmaDescriptor(tm_q);
    PrefetchTmaDescriptor(tm_k);
    PrefetchTmaDescriptor(tm_v);
    PrefetchTmaDescriptor(tm_do);
  }
  __syncthreads();
}

}  // namespace jaxdnn::attention::sm90
