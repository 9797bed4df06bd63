// How the CUDA recurrence runs one direction of one layer: a persistent
// kernel, one CTA per slice of the hidden units on its own SM (at batch >=
// 32, two groups of such CTAs, each group half the batch), every step's
// recurrent product over that slice's weights (kept in shared memory where
// they fit, else read through L2), one grid-wide barrier a step.
//
// Forward: a CTA owns `units` hidden units and computes the product's
// columns of all their gates (cols = gates * units) over k = the hidden
// size: q[b][col] = sum_k h[b][k] W[k][col]. Backward: the same CTA owns the
// same kind of slice and computes dh[b][unit] = sum_n dq[b][n] W[unit][n]
// over n = every gate column. 16-bit weights take the tensor cores
// (mma.sync m16n8k16: the staged rows, rounded to the weights' dtype, as A,
// the slice as B in fragment order; float32 accumulation): warps take
// (8-column tile, part of k) jobs. Float32 weights, and 16-bit ones whose
// 16-row tile does not fit, take the FMA product: warps take (column group
// of 4, part of k) jobs, lanes split k (k = lane + 32 * round). Either way
// the partial sums meet in shared memory in a fixed order (deterministic).
//
// The plan is host code (the handler's and the workspace query's), pure
// arithmetic over the problem and two device attributes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "common/switches.h"
#include "recurrent/problem.h"

namespace jaxdnn::recurrent {

// The precision the recurrent weights are kept in on the GPU (the model's:
// cuDNN's bf16 LSTM multiplies bf16 weights); the state and every sum stay
// float32.
enum class WeightDtype : int32_t { kF32 = 0, kBf16 = 1, kF16 = 2 };

inline int64_t WeightBytes(WeightDtype w) { return w == WeightDtype::kF32 ? 4 : 2; }

constexpr int kRnnThreads = 256;
constexpr int kRnnWarps = kRnnThreads / 32;
constexpr int kRnnMaxBatchTile = 8;

struct RnnDevice {
  int64_t sms = 0;         // multiprocessors: one CTA each at most
  int64_t smem_optin = 0;  // dynamic shared memory a CTA may ask for
};

struct RnnCudaPlan {
  bool ok = false;
  const char* why = nullptr;  // static text where !ok
  bool backward = false;
  bool mma = false;  // the tensor-core product (else FMA)
  int64_t gates = 0, hidden = 0, batch = 0;
  int64_t units = 0;         // hidden units a CTA owns
  int64_t unit_ctas = 0;     // ceil(hidden / units): the CTAs of one batch group, one slice each
  int64_t batch_groups = 1;  // groups of CTAs splitting the batch, each every slice
  int64_t group_rows = 0;    // ceil(batch / batch_groups): a group's rows
  int64_t ctas = 0;          // unit_ctas * batch_groups: the grid
  int64_t cols = 0;          // the product's columns per CTA
  int64_t col_groups = 0;    // FMA: ceil(cols / 4)
  int64_t n_tiles = 0;       // mma: ceil(cols / 8)
  int64_t k = 0;             // the product's reduction length
  int64_t rounds = 0;        // FMA: ceil(k / 32)
  int64_t k_steps = 0;       // mma: ceil(k / 16)
  int64_t chunk_steps = 0;   // mma: k steps a staged chunk of the rows holds (k_steps: one chunk)
  int64_t k_chunks = 1;      // mma: ceil(k_steps / chunk_steps)
  int64_t k_parts = 1;       // warps sharing one column group's (tile's) k
  int64_t batch_tile = 0;    // rows of the batch a pass holds (mma: 16, 32 or 64)
  bool resident = false;     // the weight slice in shared memory
  int64_t wbytes = 4;
  // Shared memory (bytes from its start): weight slice; input tile (FMA:
  // [batch_tile][rounds * 32] f32; mma: [batch_tile][x_stride] in the
  // weights' dtype, one chunk of k); partials [red_parts()][batch_tile][red_stride] f32; bias
  // [red_stride] f32; the forward's per-tile operands of its own units
  // (extra: gx [batch_tile][cols], h and c [batch_tile][units], f32).
  int64_t x_stride = 0, red_stride = 0;
  int64_t smem_a = 0, smem_red = 0, smem_bias = 0, smem_extra = 0, smem_bytes = 0;
  // Workspace (bytes from its start): the sliced weights, the exchanged
  // rows (forward: h, 2 x [B][H] f32; backward: dq, 2 x [B][G*H], f32 or,
  // with the mma product, in the weights' dtype), the mma forward's h again
  // in the weights' dtype (half: what the other CTAs stage; the f32 copy
  // keeps each unit's own state exact), the backward's own state (dh, dc,
  // direct: 3 x [B][H]), the barrier counter.
  int64_t ws_exchange = 0, ws_half = 0, ws_state = 0, ws_counter = 0, ws_bytes = 0;

  int64_t cols4() const { return col_groups * 4; }
  // Partial sums a column meets: one per k part of each chunk.
  int64_t red_parts() const { return k_parts * k_chunks; }
  int64_t k_padded() const { return rounds * 32; }
  // One CTA's slice of the weights, in elements: FMA [col_groups][rounds][32][4],
  // mma [n_tiles][k_steps][32][4] (each lane's B fragment).
  int64_t slice_elems() const { return mma ? n_tiles * k_steps * 128 : col_groups * rounds * 128; }
};

inline int64_t RnnAlign(int64_t bytes) { return (bytes + 255) / 256 * 256; }
inline int64_t RnnCeil(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The shared-memory layout for `rows` rows a tile with or without the slice
// resident; false where it does not fit.
inline bool LayOut(RnnCudaPlan& p, int64_t rows, bool resident, int64_t extra_per_row, const RnnDevice& dev) {
  const int64_t slice = resident ? RnnAlign(p.slice_elems() * p.wbytes) : 0;
  const int64_t tile = p.mma ? rows * p.x_stride * p.wbytes : rows * p.k_padded() * 4;
  p.smem_a = slice;
  p.smem_red = p.smem_a + RnnAlign(tile);
  p.smem_bias = p.smem_red + RnnAlign(p.red_parts() * rows * p.red_stride * 4);
  p.smem_extra = p.smem_bias + RnnAlign(p.red_stride * 4);
  p.smem_bytes = p.smem_extra + RnnAlign(rows * extra_per_row);
  p.resident = resident;
  p.batch_tile = rows;
  return p.smem_bytes <= dev.smem_optin;
}

// Rows a tile from `most` down (halving, not below `least`) that fit, the
// slice resident where it fits with at least `resident_rows` rows; 0: none.
inline int64_t ChooseTile(RnnCudaPlan& p, int64_t most, int64_t least, int64_t resident_rows,
                          int64_t extra_per_row, const RnnDevice& dev) {
  const bool resident = LayOut(p, std::max(least, std::min(most, resident_rows)), true, extra_per_row, dev);
  for (int64_t rows = most; rows >= least; rows /= 2) {
    if (LayOut(p, rows, resident, extra_per_row, dev)) return rows;
  }
  return 0;
}

// The product's layout with the batch split over `groups` groups of CTAs
// (each group its own copy of every slice, its own rows), or false where it
// does not fit. Sets every field the kernels' layout depends on.
inline bool PlanGroups(RnnCudaPlan& p, const RnnDims& d, WeightDtype wd, const RnnDevice& dev,
                       int64_t groups) {
  const int64_t H = d.hidden, G = p.gates;
  const bool backward = p.backward;
  // As many CTAs as SMs allow; the forward gives each at least 32 columns
  // (8 warps x 4), fewer CTAs making the step barrier cheaper.
  if (dev.sms < groups) return false;
  p.batch_groups = groups;
  p.group_rows = RnnCeil(d.batch, groups);
  p.units = RnnCeil(H, dev.sms / groups);
  if (!backward) p.units = std::max(p.units, std::min(H, RnnCeil(32, G)));
  p.unit_ctas = RnnCeil(H, p.units);
  p.ctas = p.unit_ctas * groups;
  if (p.ctas > dev.sms) return false;
  p.cols = backward ? p.units : G * p.units;
  p.col_groups = RnnCeil(p.cols, 4);
  p.n_tiles = RnnCeil(p.cols, 8);
  p.k = backward ? G * H : H;
  p.rounds = RnnCeil(p.k, 32);
  p.k_steps = RnnCeil(p.k, 16);
  const int64_t extra_per_row = backward ? 0 : (p.cols + 2 * p.units) * 4;
  bool planned = false;
  if (wd != WeightDtype::kF32 && SwitchText(Switch::kRnnMma) != "0") {
    // Tiles of 16, 32 or 64 rows (one to four m16 tiles; rows past the
    // batch are zeros); a row 16 bytes longer than k so that the fragment
    // loads of 8 rows fall in 32 different banks.
    // Where no 16-row tile of the whole k fits (the backward's k = G * H at
    // H = 2048), the rows are staged and multiplied in chunks of k, each
    // chunk's partials kept apart (summed in order with the others).
    // k_parts: the fewest that make the (n tile, k part) jobs a multiple of
    // the 8 warps (n_tiles 5, as the GRU's 33 columns at H=1024, left 3 warps
    // idle with one part).
    p.mma = true;
    p.k_parts = kRnnWarps / std::gcd<int64_t>(p.n_tiles, kRnnWarps);
    p.red_stride = p.n_tiles * 8;
    const int64_t want = std::min<int64_t>(64, RnnCeil(p.group_rows, 16) * 16);
    int64_t most = 16;
    while (most < want) most *= 2;
    for (int64_t chunks = 1; chunks <= 8 && !planned; chunks *= 2) {
      p.chunk_steps = RnnCeil(p.k_steps, chunks);
      p.k_chunks = RnnCeil(p.k_steps, p.chunk_steps);
      p.x_stride = p.chunk_steps * 16 + 8;
      // Two batch groups only pay with the slice resident: chunk k further
      // rather than stream the doubled slice.
      planned = ChooseTile(p, most, 16, 16, extra_per_row, dev) > 0 && (groups == 1 || p.resident);
    }
  }
  if (!planned && groups > 1) return false;
  if (!planned) {
    // Batch tiles of 1, 2, 4 or 8 rows: the FMA product is instantiated for
    // those (a tile's rows past the batch are zeros).
    p.mma = false;
    p.k_parts = std::max<int64_t>(1, kRnnWarps / p.col_groups);
    p.chunk_steps = 0;
    p.k_chunks = 1;
    p.x_stride = 0;
    p.red_stride = p.cols4();
    int64_t tile = 1;
    while (tile < kRnnMaxBatchTile && tile < p.group_rows) tile *= 2;
    planned = ChooseTile(p, tile, 1, std::min<int64_t>(tile, 4), extra_per_row, dev) > 0;
  }
  return planned;
}

inline RnnCudaPlan MakeRnnPlan(bool backward, RnnMode mode, const RnnDims& d, WeightDtype wd,
                               const RnnDevice& dev) {
  RnnCudaPlan p;
  p.backward = backward;
  p.gates = GatesOf(mode);
  p.hidden = d.hidden;
  p.batch = d.batch;
  p.wbytes = WeightBytes(wd);
  const int64_t H = d.hidden;
  if (H <= 0 || d.batch <= 0 || dev.sms <= 0) {
    p.why = "an empty problem has no plan";
    return p;
  }
  // At batch >= 32 (hidden >= 512) the rows every CTA stages each step (all
  // of h, or of dq at k = 4H) cost more than the product: two batch groups,
  // each CTA twice the units and half the rows, halve them, where the
  // doubled slice stays resident on the tensor-core path
  // (docs/perf/recurrent.md).
  bool planned = false;
  if (d.batch >= 32 && H >= 512 && SwitchText(Switch::kRnnBatchGroups) != "1") {
    planned = PlanGroups(p, d, wd, dev, 2) && p.resident && p.mma;
  }
  if (!planned) planned = PlanGroups(p, d, wd, dev, 1);
  if (!planned) {
    p.why = "the hidden size is too large for one row of the product in shared memory";
    return p;
  }
  const int64_t all_slices = RnnAlign(p.unit_ctas * p.slice_elems() * p.wbytes);
  const int64_t exchange = RnnAlign(2 * d.batch * p.k * 4);
  const int64_t state = backward ? RnnAlign(3 * d.batch * H * 4) : 0;
  const int64_t half = p.mma && !backward ? RnnAlign(2 * d.batch * H * p.wbytes) : 0;
  p.ws_exchange = all_slices;
  p.ws_half = p.ws_exchange + exchange;
  p.ws_state = p.ws_half + half;
  p.ws_counter = p.ws_state + state;
  p.ws_bytes = p.ws_counter + 256;
  p.ok = true;
  return p;
}

}  // namespace jaxdnn::recurrent
