// How a softmax-family row is spread over a Hopper cluster: each of
// `cluster` CTAs holds a contiguous share of the row's 16-byte vectors in
// registers, `vpt` per thread over `tpr` threads, so the row is read once
// and written once; `rpc` rows share a CTA when rows are short (cluster 1).
// vpt == 0: the row cannot be held this way (unaligned, a width that is not
// whole vectors, or longer than 8 CTAs of 512 threads hold at 8 vectors a
// thread: 262144 16-bit or 131072 float32 entries) and the warp-per-row
// two-pass kernels serve it.
#pragma once

#include <cstdint>

namespace jaxdnn::softmax {

struct RowSplit {
  int vpt = 0;
  int tpr = 0;
  int rpc = 1;
  int cluster = 1;
};

constexpr int kMaxCluster = 8;       // the portable cluster size
constexpr int kRowThreads = 512;     // the most threads of a CTA (128 registers each)
constexpr int kShareVectors = 2048;  // a CTA's share before the row is split further (default)

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// share_vectors: the most vectors one CTA takes while the cluster can grow.
inline RowSplit ChooseRowSplit(int64_t rows, int64_t cols, int elem_bytes, bool aligned,
                               int64_t share_vectors = kShareVectors) {
  RowSplit s;
  const int elems = 16 / elem_bytes;
  if (!aligned || cols <= 0 || cols % elems != 0) return s;
  const int64_t nvec = cols / elems;
  int cluster = 1;
  while (CeilDiv(nvec, cluster) > share_vectors && cluster < kMaxCluster) cluster *= 2;
  const int64_t share = CeilDiv(nvec, cluster);
  const int vpt = CeilDiv(share, 4) > kRowThreads ? 8 : 4;
  const int64_t tpr = (CeilDiv(share, vpt) + 31) / 32 * 32;
  if (tpr > kRowThreads) return s;
  int fit = 1;  // the fewest vectors per thread that cover the share
  while (fit * tpr < share) fit *= 2;
  s.vpt = fit;
  s.tpr = int(tpr);
  s.cluster = cluster;
  s.rpc = cluster == 1 && tpr < 256 ? int(256 / tpr) : 1;
  const int64_t grid = cluster > 1 ? rows * cluster : CeilDiv(rows, s.rpc);
  if (grid > 0x7fffffff) return RowSplit{};  // the warp kernels stride over any number of rows
  return s;
}

// Whether `buffers` staging buffers of a CTA's share fit in shared memory
// (two for the forward's x, four for the backward's y and dy).
constexpr int64_t kMaxStageBytes = 200 * 1024;
inline bool StagedFits(const RowSplit& s, int64_t cols, int elem_bytes, int buffers) {
  const int64_t share = CeilDiv(cols / (16 / elem_bytes), s.cluster);
  return s.vpt > 0 && buffers * share * 16 <= kMaxStageBytes;
}

}  // namespace jaxdnn::softmax
