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

// Smallest vpt (1, 2, 4, ... max_vpt) that covers the row with <= 128 threads;
// otherwise max_vpt with up to 512 threads; else the scalar path. With
// max_vpt = 4 a thread holds at most 32 (fp16/bf16) values per operand, which
// keeps every kernel under the 128-register cap of 512-thread blocks.
inline RowLaunch ChooseRowLaunch(int64_t dim, int elems_per_vec, bool aligned, int max_vpt,
                                 int threads_per_block) {
  RowLaunch l;
  if (aligned && dim % elems_per_vec == 0) {
    const int64_t nvec = dim / elems_per_vec;
    for (int vpt = 1; vpt <= max_vpt; vpt *= 2) {
      if ((nvec + vpt - 1) / vpt <= 128) { l.vpt = vpt; break; }
    }
    if (l.vpt == 0 && (nvec + max_vpt - 1) / max_vpt <= 512) l.vpt = max_vpt;
    if (l.vpt != 0) {
      l.tpr = RoundUp32((nvec + l.vpt - 1) / l.vpt);
      l.rpc = l.tpr >= threads_per_block ? 1 : threads_per_block / l.tpr;
      return l;
    }
  }
  l.tpr = dim >= 256 ? 256 : RoundUp32(dim);
  l.rpc = 1;
  return l;
}

}  // namespace jaxdnn::norms
