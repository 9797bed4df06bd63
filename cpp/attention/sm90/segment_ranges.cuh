// The segment-id range (min, max) of every 64 keys and every 64 query rows,
// computed once per forward call before the Hopper forward's extended path
// runs. Its producer votes on each kv block of a tile from these ranges (one
// load per lane) instead of reading the block's ids (kBlockN / 4 dependent
// 16-byte loads per lane, repeated by every head's tile): on packed documents
// of ~1024 keys that vote sat between a tile's claim and its first K load.
// Layout: kv ranges [batch, kv_groups] then query ranges [batch, q_groups], as
// int2; a group's keys or rows past the length are left out, so a group wholly
// past it is empty (INT_MAX, INT_MIN). The group counts are even (two groups
// per 128-key block or 128-row tile), which keeps a block's pair 16-byte aligned.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "attention/sm90/forward_mask.cuh"
#include "attention/sm90/forward_workspace.h"

namespace jaxdnn::attention::sm90 {

constexpr int kSegGroup = 64;  // keys or query rows per range

// One warp per group (two ids per lane): kv groups first, then query groups.
__global__ void __launch_bounds__(256)
    SegmentRangesKernel(const int32_t* __restrict__ kv_ids, const int32_t* __restrict__ q_ids, int batch,
                        int kv_len, int q_len, int kv_groups, int q_groups, int2* ranges) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t kv_total = static_cast<int64_t>(batch) * kv_groups;
  if (warp >= kv_total + static_cast<int64_t>(batch) * q_groups) return;
  const bool kv = warp < kv_total;
  const int64_t local = kv ? warp : warp - kv_total;
  const int groups = kv ? kv_groups : q_groups;
  const int len = kv ? kv_len : q_len;
  const int b = static_cast<int>(local / groups);
  const int g = static_cast<int>(local % groups);
  const int32_t* ids = (kv ? kv_ids : q_ids) + static_cast<int64_t>(b) * len;
  int mn = INT_MAX, mx = INT_MIN;
#pragma unroll
  for (int k = 0; k < kSegGroup / 32; ++k) {
    const int i = g * kSegGroup + lane + 32 * k;
    if (i < len) {
      const int v = ids[i];
      mn = min(mn, v);
      mx = max(mx, v);
    }
  }
  mn = __reduce_min_sync(0xffffffffu, mn);
  mx = __reduce_max_sync(0xffffffffu, mx);
  if (lane == 0) ranges[warp] = make_int2(mn, mx);
}

// Launches the kernel into `ranges` (SegmentRangeInts ints, 8-byte aligned)
// and points the mask parameters' range fields at it.
inline cudaError_t LaunchSegmentRanges(FwdMaskParams& m, int batch, int q_len, int kv_len, int2* ranges,
                                       cudaStream_t stream) {
  const int kv_groups = static_cast<int>(SegmentRangeGroups(kv_len));
  const int q_groups = static_cast<int>(SegmentRangeGroups(q_len));
  const int64_t warps = static_cast<int64_t>(batch) * (kv_groups + q_groups);
  const int blocks = static_cast<int>((warps * 32 + 255) / 256);
  SegmentRangesKernel<<<blocks, 256, 0, stream>>>(m.kv_segments, m.q_segments, batch, kv_len, q_len,
                                                  kv_groups, q_groups, ranges);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  m.kv_seg_ranges = ranges;
  m.q_seg_ranges = ranges + static_cast<int64_t>(batch) * kv_groups;
  m.kv_groups = kv_groups;
  m.q_groups = q_groups;
  return cudaSuccess;
}

}  // namespace jaxdnn::attention::sm90
