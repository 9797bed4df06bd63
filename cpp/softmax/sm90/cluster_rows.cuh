// Device blocks of the softmax family's register-resident row kernels: a row
// (or a CTA's share of it) as packed 16-byte vectors in registers, and
// deterministic reductions over the row's threads, warps and cluster CTAs.
// Every reduction merges in a fixed order (butterflies of commutative merges
// within a warp, then warps in index order, then CTAs in rank order), so all
// threads of a row get the same bits, run after run.
#pragma once

#include <cooperative_groups.h>
#include <cstdint>
#include <type_traits>

#include "common/cuda_vec.cuh"

namespace jaxdnn::softmax {

constexpr float kLog2e = 1.4426950408889634f;

// 2^x, the hardware approximation (-inf gives 0, NaN stays NaN).
__device__ inline float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A running maximum and the sum of exp(v - m) over the values it covers;
// an empty part is {-inf, 0}.
struct MaxSum {
  float m, s;
};

// Commutative, bit for bit (each side's term is computed alike), so a
// butterfly leaves every lane the same value. An empty side adds 0 even when
// both maxima are -inf.
__device__ inline MaxSum Merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  const float sa = a.s == 0.f ? 0.f : a.s * Exp2((a.m - m) * kLog2e);
  const float sb = b.s == 0.f ? 0.f : b.s * Exp2((b.m - m) * kLog2e);
  return {m, sa + sb};
}
__device__ inline float Merge(float a, float b) { return a + b; }

__device__ inline MaxSum ShflXor(MaxSum v, int o) {
  return {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
}
__device__ inline float ShflXor(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }

// Reduces v over the row's threads (threadIdx.x of one threadIdx.y) and, for
// cluster > 1, over the cluster's CTAs (one row per cluster). `warp_slots`
// holds one entry per warp of the block, `cta_slot` one entry. Every thread
// must call it. kOnce: the slots are written once per kernel, and the caller
// ends with RowReduceDone (a CTA's slot must outlive its remote readers; the
// arrive is done here, so the wait can come after the row's stores). Not
// kOnce (a loop over rows): the caller alternates two sets of slots, which
// this call's barriers make safe to rewrite two calls later.
// The identity of Merge.
template <typename R>
__device__ inline R Empty();
template <>
__device__ inline MaxSum Empty<MaxSum>() {
  return {-INFINITY, 0.f};
}
template <>
__device__ inline float Empty<float>() {
  return 0.f;
}

template <typename R>
__device__ inline R WarpMerge(R v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Merge(v, ShflXor(v, o));
  return v;
}

// The parts (one per warp, or per CTA) are merged by one butterfly over a
// warp, lane i holding part i: a few dependent steps rather than one per part.
template <bool kOnce, typename R>
__device__ inline R RowReduceImpl(R v, R* warp_slots, R* cta_slot, int cluster) {
  v = WarpMerge(v);
  const int warps = blockDim.x >> 5, lane = threadIdx.x & 31;
  if (warps > 1) {
    R* slots = warp_slots + threadIdx.y * warps;
    if (lane == 0) slots[threadIdx.x >> 5] = v;
    __syncthreads();
    v = WarpMerge(lane < warps ? slots[lane] : Empty<R>());
  }
  if (cluster > 1) {
    namespace cg = cooperative_groups;
    cg::cluster_group c = cg::this_cluster();
    if (threadIdx.x == 0) *cta_slot = v;
    c.sync();
    v = WarpMerge(lane < cluster ? *c.map_shared_rank(cta_slot, lane) : Empty<R>());
    if constexpr (kOnce) c.barrier_arrive();
  }
  return v;
}

template <typename R>
__device__ inline R RowReduce(R v, R* warp_slots, R* cta_slot, int cluster) {
  return RowReduceImpl<true>(v, warp_slots, cta_slot, cluster);
}
template <typename R>
__device__ inline R RowReduceStep(R v, R* warp_slots, R* cta_slot, int cluster) {
  return RowReduceImpl<false>(v, warp_slots, cta_slot, cluster);
}

__device__ inline void RowReduceDone(int cluster) {
  if (cluster > 1) cooperative_groups::this_cluster().barrier_wait();
}

// Where this thread's vectors of its row lie: the row, and the range of
// vectors [first, end) of its CTA's share; vector k of the thread is
// first + threadIdx.x + k * blockDim.x.
struct RowShare {
  int64_t row;
  int64_t first, end;
  bool live;
};

__device__ inline RowShare ThisShare(int64_t rows, int64_t nvec, int cluster) {
  RowShare r;
  int64_t rank = 0;
  if (cluster > 1) {
    r.row = blockIdx.x / cluster;
    rank = blockIdx.x % cluster;
  } else {
    r.row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  }
  const int64_t share = (nvec + cluster - 1) / cluster;
  r.first = rank * share;
  r.end = r.first + share < nvec ? r.first + share : nvec;
  r.live = r.row < rows;
  return r;
}

// Whether vector k of this thread lies in its CTA's share of a live row.
__device__ inline bool InShare(const RowShare& sh, int k) {
  return sh.live && sh.first + threadIdx.x + int64_t(k) * blockDim.x < sh.end;
}

// The `where` bytes of one 16-byte vector of T (4 or 8 entries) as one word,
// byte e for entry e.
template <int kElems>
using KeepBits = std::conditional_t<kElems == 8, uint64_t, uint32_t>;

template <int kElems>
__device__ inline KeepBits<kElems> LoadKeep(const bool* p) {
  if constexpr (kElems == 8) {
    const uint2 v = __ldcs(reinterpret_cast<const uint2*>(p));
    return uint64_t(v.x) | (uint64_t(v.y) << 32);
  } else {
    return __ldcs(reinterpret_cast<const unsigned int*>(p));
  }
}
template <typename Bits>
__device__ inline bool Kept(Bits keep, int e) {
  return (keep >> (8 * e)) & 0xff;
}

// The `where` words of a thread's vectors (none without a mask: every entry
// of a vector in the share is kept).
template <bool kMasked, int kElems, int kVpt>
struct RowKeep {
  KeepBits<kElems> bits[kMasked ? kVpt : 1];
  __device__ void Load(int k, bool in, const bool* p) {
    if constexpr (kMasked) bits[k] = in ? LoadKeep<kElems>(p) : 0;
  }
  // Whether entry e of vector k counts (`in`: the vector is in the share).
  __device__ bool operator()(int k, int e, bool in) const {
    if constexpr (kMasked) return Kept(bits[k], e);
    return in;
  }
};

}  // namespace jaxdnn::softmax
