// How a norm row is spread over threads: `vpt` 16-byte vectors per thread,
// `tpr` threads per row, `rpc` rows per block. vpt == 0 selects the scalar
// path used when the row cannot be moved in aligned 16-byte vectors.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "norms/problem.h"

namespace jaxdnn::norms {

struct RowLaunch {
  int vpt = 0;
  int tpr = 0;
  int rpc = 1;
};

inline int RoundUp32(int64_t n) { return int((n + 31) / 32 * 32); }

inline int NextPow2(int64_t n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

inline RowLaunch ScalarLaunch(int64_t dim) {
  RowLaunch l;
  l.tpr = dim >= 256 ? 256 : RoundUp32(dim);
  return l;
}

// Threads a grid needs to keep an H100's 132 SMs loaded (1536 of each SM's
// 2048): below it, a norm kernel is latency-bound, not bandwidth-bound.
constexpr int64_t kFillThreads = 132 * 1536;

// Forward: the fewest threads per row such that each holds at most max_vpt
// (else up to 8) packed vectors in registers; up to 512 threads. Problems
// too small to fill the GPU that way spread each row over more threads
// (fewer vectors each) until they do.
inline RowLaunch ChooseFwdLaunch(int64_t rows, int64_t dim, int elems_per_vec, bool aligned, int max_vpt,
                                 int block_threads, int64_t fill_threads = kFillThreads) {
  if (!aligned || dim % elems_per_vec != 0) return ScalarLaunch(dim);
  const int64_t nvec = dim / elems_per_vec;
  RowLaunch l;
  for (int vpt = max_vpt; vpt <= 8; vpt *= 2) {
    l.tpr = RoundUp32((nvec + vpt - 1) / vpt);
    if (l.tpr <= 512) break;
  }
  if (l.tpr > 512) return ScalarLaunch(dim);
  l.vpt = NextPow2((nvec + l.tpr - 1) / l.tpr);
  while (l.vpt > 1 && rows * l.tpr < fill_threads) {
    const int tpr = RoundUp32((nvec + l.vpt / 2 - 1) / (l.vpt / 2));
    if (tpr > 512) break;
    l.vpt /= 2;
    l.tpr = tpr;
  }
  l.rpc = l.tpr >= block_threads ? 1 : block_threads / l.tpr;
  return l;
}

// Backward: each thread also keeps float32 dscale/dbias partials for its
// columns in registers, so rows are spread wide: the smallest vpt (1, 2, 4)
// whose row fits in 1024, 768 or 512 threads (the register budget of
// NormBwdRingKernel), and rows of up to 256 threads share a block.
inline RowLaunch ChooseBwdLaunch(int64_t dim, int elems_per_vec, bool aligned) {
  if (!aligned || dim % elems_per_vec != 0) return ScalarLaunch(dim);
  const int64_t nvec = dim / elems_per_vec;
  RowLaunch l;
  const int max_threads[3] = {1024, 768, 512};
  for (int i = 0, vpt = 1; i < 3; ++i, vpt *= 2) {
    if (RoundUp32((nvec + vpt - 1) / vpt) <= max_threads[i]) {
      l.vpt = vpt;
      break;
    }
  }
  if (l.vpt == 0) return ScalarLaunch(dim);
  l.tpr = RoundUp32((nvec + l.vpt - 1) / l.vpt);
  l.rpc = l.tpr >= 256 ? 1 : 256 / l.tpr;
  return l;
}

// The phase-grouped forward for odd widths (norms/sm80/norm_forward_phased.cuh):
// body vectors per thread (1, 2 or 4; 0: the row is too wide), threads per
// row (at most 256), and rows per block (at least 4, so the parameters a
// block loads once serve several rows; blocks enough for one full wave).
struct PhasedLaunch {
  int vpt = 0;
  int tpr = 0;
  int64_t rows_per_block = 1;
  int64_t blocks = 0;
};

// Distinct 16-byte phases of the rows of a row_bytes-long row: 16 / gcd(16, row_bytes).
JAXDNN_HOST_DEVICE inline int PhaseCountOfBytes(int64_t row_bytes) {
  int64_t g = 16;
  while (row_bytes % g != 0) g /= 2;
  return int(16 / g);
}

// max_vpt: 4 for the forward; the backward keeps three floats a column
// (scale, dscale, dbias), so at most 16 columns a thread. min_body: the
// backward takes rows of at least kPhasedBwdMinBody vectors; narrower rows
// would leave one warp a block and thousands of partial rows to reduce
// (127-wide rows ran at a fifth of XLA's rate), and stay on the stream kernel.
constexpr int64_t kPhasedBwdMinBody = 64;
inline PhasedLaunch ChoosePhased(int64_t rows, int64_t dim, int elems_per_vec, int phases, int max_vpt = 4,
                                 int64_t min_body = 0) {
  PhasedLaunch l;
  const int64_t body = dim / elems_per_vec;
  if (body < min_body) return l;
  for (int vpt = 1; vpt <= max_vpt; vpt *= 2) {
    if (RoundUp32((body + vpt - 1) / vpt) <= 256) {
      l.vpt = vpt;
      break;
    }
  }
  if (l.vpt == 0) return l;
  l.tpr = std::max(32, RoundUp32((body + l.vpt - 1) / l.vpt));
  const int64_t per_phase = (rows + phases - 1) / phases;
  const int64_t wave = 132 * (2048 / l.tpr);
  const int64_t chunks = std::max<int64_t>(1, std::min((wave + phases - 1) / phases, (per_phase + 3) / 4));
  l.rows_per_block = (per_phase + chunks - 1) / chunks;
  l.blocks = chunks * phases;
  return l;
}

// The two-sweep stream kernels (norms/sm80/norm_stream.cuh) take the rows the
// register kernels above cannot: in 16-byte vectors when the row is made of
// them (`vec`), else element by element. `tpr` threads per row slot (up to
// 1024: four vectors or sixteen elements each), `rpc` slots per block (short
// rows share blocks of 256 threads, at most 8 slots).
struct StreamLaunch {
  bool vec = false;
  int tpr = 0;
  int rpc = 1;
  size_t smem = 0;        // backward: the slots' float32 partial rows, [rpc][2][columns]
  int blocks_per_sm = 0;  // backward: 0 when the partials do not fit shared memory
  int cluster = 1;        // backward: CTAs sharing a row, each a slice of its columns
};

inline StreamLaunch ChooseStream(int64_t dim, int elems_per_vec, bool aligned) {
  StreamLaunch l;
  l.vec = aligned && dim % elems_per_vec == 0;
  const int64_t n = l.vec ? dim / elems_per_vec : dim;
  // Element rows: 16 elements a thread, so a row's reductions are amortized
  // and an SM keeps several rows in flight (4 a thread ran 4097-wide rows
  // at under half of XLA's rate, one 1024-thread row per SM at a time).
  l.tpr = int(std::min<int64_t>(1024, RoundUp32((n + (l.vec ? 3 : 15)) / (l.vec ? 4 : 16))));
  l.rpc = l.tpr >= 256 ? 1 : std::min(8, 256 / l.tpr);
  return l;
}

inline StreamLaunch ChooseFwdStream(int64_t dim, int elems_per_vec, bool aligned) {
  return ChooseStream(dim, elems_per_vec, aligned);
}

// The backward's partials live in shared memory, [rpc][2][columns] float32
// (both norms keep two rows). A row whose partials exceed 200 KiB is split
// over a cluster of 2-8 CTAs (sm_90), each owning a slice of at most 64 KiB
// of partials: 65536-wide rows take 8. As many blocks an SM as its 2048
// threads and 228 KiB of shared memory allow; blocks_per_sm == 0: too wide.
inline StreamLaunch ChooseBwdStream(int64_t dim, int elems_per_vec, bool aligned) {
  StreamLaunch l = ChooseStream(dim, elems_per_vec, aligned);
  const int64_t n = l.vec ? dim / elems_per_vec : dim, width = l.vec ? elems_per_vec : 1;
  l.smem = size_t(l.rpc) * 2 * size_t(dim) * sizeof(float);
  if (l.smem > 200 * 1024) {
    for (l.cluster = 2; l.cluster <= 8; l.cluster *= 2) {
      const int64_t share = (n + l.cluster - 1) / l.cluster;
      l.smem = 2 * size_t(share * width) * sizeof(float);
      // At most 512 threads: the clustered kernel's launch bound.
      l.tpr = int(std::min<int64_t>(512, RoundUp32(l.vec ? (share + 3) / 4 : (share + 15) / 16)));
      l.rpc = 1;
      if (l.smem <= 64 * 1024) break;
    }
    if (l.cluster > 8) return l;
  }
  const int64_t by_smem = (228 * 1024) / int64_t(l.smem + 1024 + 2 * 8 * 64 * sizeof(float));
  l.blocks_per_sm = int(std::max<int64_t>(1, std::min<int64_t>(2048 / (l.tpr * l.rpc), by_smem)));
  return l;
}

}  // namespace jaxdnn::norms
