// Where a dK/dV CTA works (two-kernel d64/d128 and d256, fused): its key
// block, (batch, head) and the query blocks it visits.
#pragma once

#include "attention/sm90/backward_common.cuh"

namespace jaxdnn::attention::sm90 {

struct BwdKeyBlock {
  int n_block;  // key block
  int bh;       // b * heads + h
  int h, b;     // query head, batch
  int hk;       // kv head
  int num_m;    // query blocks of the sequence
  int m_begin;  // first query block visited (causal: the diagonal's)
  int m_count;  // query blocks visited, m_begin .. num_m - 1
};

// num_m(): the query block count, called after hk is known (the order the
// kernels' generated code was verified with).
template <int kBlockN, int kBlockM, typename NumM>
__device__ __forceinline__ BwdKeyBlock BwdKeyBlockAt(const BwdParams& p, int n_block, int bh, NumM num_m) {
  BwdKeyBlock c;
  c.n_block = n_block;
  c.bh = bh;
  c.h = bh % p.heads;
  c.b = bh / p.heads;
  c.hk = c.h / p.group;
  c.num_m = num_m();
  c.m_begin = p.causal ? (n_block * kBlockN) / kBlockM : 0;
  c.m_count = c.num_m - c.m_begin;
  return c;
}

// The two-kernel dK/dV grids' block order: head-major (the kv blocks of one
// (batch, head) adjacent, so they share Q and dO in L2) or kv-block-major
// (grid y; causal: n = 0, the heaviest, first).
template <int kBlockN, int kBlockM>
__device__ __forceinline__ BwdKeyBlock BwdKeyBlockOfCta(const BwdParams& p) {
  const int num_n = (p.kv_len + kBlockN - 1) / kBlockN;
  const int n_block = p.head_major ? static_cast<int>(blockIdx.x) % num_n : static_cast<int>(blockIdx.y);
  const int bh = p.head_major ? static_cast<int>(blockIdx.x) / num_n : static_cast<int>(blockIdx.x);
  return BwdKeyBlockAt<kBlockN, kBlockM>(p, n_block, bh, [&] { return (p.q_len + kBlockM - 1) / kBlockM; });
}

}  // namespace jaxdnn::attention::sm90
