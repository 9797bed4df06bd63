// How a norm row is spread over threads: `vpt` 16-byte vectors per thread,
// `tpr` threads per row, `rpc` rows per block. vpt == 0 selects the scalar
// path used when the row cannot be moved in aligned 16-byte vectors.
#pragma once

#include <cstdint>

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

// Forward: the fewest threads per row such that each holds at most max_vpt
// (else up to 8) packed vectors in registers; up to 512 threads.
inline RowLaunch ChooseFwdLaunch(int64_t dim, int elems_per_vec, bool aligned, int max_vpt,
                                 int block_threads) {
  if (!aligned || dim % elems_per_vec != 0) return ScalarLaunch(dim);
  const int64_t nvec = dim / elems_per_vec;
  RowLaunch l;
  for (int vpt = max_vpt; vpt <= 8; vpt *= 2) {
    l.tpr = RoundUp32((nvec + vpt - 1) / vpt);
    if (l.tpr <= 512) break;
  }
  if (l.tpr > 512) return ScalarLaunch(dim);
  l.vpt = NextPow2((nvec + l.tpr - 1) / l.tpr);
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

}  // namespace jaxdnn::norms
