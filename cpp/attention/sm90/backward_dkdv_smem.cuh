// The dK/dV kernels' shared memory (two-kernel d64/d128 and d256, fused):
// resident K and V, a ring of Q / dO / lse / delta stages, and the barriers
// of that pipeline. Kernel-specific regions (P^T panels, dS, dQ buffers,
// extended-path slots) stay with their kernel, at the Cfg's offsets.
#pragma once

#include "attention/sm90/backward_common.cuh"

namespace jaxdnn::attention::sm90 {

template <class Cfg>
struct DkDvSmem {
  uint8_t* base;  // the 1024-aligned dynamic shared memory; Cfg's offsets are from here
  uint8_t* k;
  uint8_t* v;
  uint8_t* q;         // kStages x kQBytes
  uint8_t* dout;      // kStages x kQBytes
  float* lse;         // kStages x kBlockM, lse * log2(e)
  float* delta;       // kStages x kBlockM
  uint64_t* kv_full;  // K and V landed
  uint64_t* q_full;   // per stage: Q, dO (TMA) and lse, delta (producer lanes) landed
  uint64_t* q_empty;  // per stage: every consumer warp is done with it

  __device__ __forceinline__ explicit DkDvSmem(uint8_t* smem) : base(smem) {
    k = base + Cfg::kOffK;
    v = base + Cfg::kOffV;
    q = base + Cfg::kOffQ;
    dout = base + Cfg::kOffDO;
    lse = reinterpret_cast<float*>(base + Cfg::kOffLse);
    delta = reinterpret_cast<float*>(base + Cfg::kOffDelta);
    uint64_t* bars = reinterpret_cast<uint64_t*>(base + Cfg::kOffBar);
    kv_full = bars;
    q_full = bars + 1;
    q_empty = bars + 1 + Cfg::kStages;
  }

  // Stage st's Q and dO tiles: query rows [row, row + kBlockM) of head h,
  // batch b, by TMA, completing on the stage's q_full barrier (whose expected
  // bytes the caller has set).
  __device__ __forceinline__ void LoadQdo(int st, const CUtensorMap* tm_q, const CUtensorMap* tm_do, int h,
                                          int row, int b) const {
    TmaLoadHeadRows<Cfg::kDBlocks, Cfg::kBlockM>(q + st * Cfg::kQBytes, tm_q, &q_full[st], h, row, b);
    TmaLoadHeadRows<Cfg::kDBlocks, Cfg::kBlockM>(dout + st * Cfg::kQBytes, tm_do, &q_full[st], h, row, b);
  }
};

}  // namespace jaxdnn::attention::sm90
