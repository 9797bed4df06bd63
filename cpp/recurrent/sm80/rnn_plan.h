// How the CUDA recurrence runs one direction of one layer: a persistent
// kernel, one CTA per slice of the hidden units on its own SM, every step's
// recurrent product over that slice's weights (kept in shared memory where
// they fit, else read through L2), one grid-wide barrier a step.
//
// Forward: a CTA owns `units` hidden units and computes the product's
// columns of all their gates (cols = gates * units) over k = the hidden
// size: q[b][col] = sum_k h[b][k] W[k][col]. Backward: the same CTA owns the
// same kind of slice and computes dh[b][unit] = sum_n dq[b][n] W[unit][n]
// over n = every gate column. Both products run one routine: warps take
// (column group of 4, part of k) jobs, lanes split k (k = lane + 32 * round),
// partial sums meet in shared memory in a fixed order (deterministic).
//
// The plan is host code (the handler's and the workspace query's), pure
// arithmetic over the problem and two device attributes.
#pragma once

#include <algorithm>
#include <cstdint>

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
  int64_t gates = 0, hidden = 0, batch = 0;
  int64_t units = 0;       // hidden units a CTA owns
  int64_t ctas = 0;        // ceil(hidden / units)
  int64_t cols = 0;        // the product's columns per CTA
  int64_t col_groups = 0;  // ceil(cols / 4)
  int64_t k = 0;           // the product's reduction length
  int64_t rounds = 0;      // ceil(k / 32)
  int64_t k_parts = 1;     // warps sharing one column group's rounds
  int64_t batch_tile = 0;  // rows of the batch a pass holds
  bool resident = false;   // the weight slice in shared memory
  int64_t wbytes = 4;
  // Shared memory (bytes from its start): weight slice, input tile
  // [batch_tile][rounds * 32] f32, partials [k_parts][batch_tile][cols4]
  // f32, bias [cols4] f32.
  int64_t smem_a = 0, smem_red = 0, smem_bias = 0, smem_bytes = 0;
  // Workspace (bytes from its start): the sliced weights, the exchanged
  // rows (forward: h, 2 x [B][H]; backward: dq, 2 x [B][G*H]), the
  // backward's own state (dh, dc, direct: 3 x [B][H]), the barrier counter.
  int64_t ws_exchange = 0, ws_state = 0, ws_counter = 0, ws_bytes = 0;

  int64_t cols4() const { return col_groups * 4; }
  int64_t k_padded() const { return rounds * 32; }
  // One CTA's slice of the weights, in elements: [col_groups][rounds][32][4].
  int64_t slice_elems() const { return col_groups * rounds * 32 * 4; }
};

inline int64_t RnnAlign(int64_t bytes) { return (bytes + 255) / 256 * 256; }
inline int64_t RnnCeil(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline RnnCudaPlan MakeRnnPlan(bool backward, RnnMode mode, const RnnDims& d, WeightDtype wd,
                               const RnnDevice& dev) {
  RnnCudaPlan p;
  p.backward = backward;
  p.gates = GatesOf(mode);
  p.hidden = d.hidden;
  p.batch = d.batch;
  p.wbytes = WeightBytes(wd);
  const int64_t H = d.hidden, G = p.gates;
  if (H <= 0 || d.batch <= 0 || dev.sms <= 0) {
    p.why = "an empty problem has no plan";
    return p;
  }
  // As many CTAs as SMs allow; the forward gives each at least 32 columns
  // (8 warps x 4), fewer CTAs making the step barrier cheaper.
  p.units = RnnCeil(H, dev.sms);
  if (!backward) p.units = std::max(p.units, std::min(H, RnnCeil(32, G)));
  p.ctas = RnnCeil(H, p.units);
  p.cols = backward ? p.units : G * p.units;
  p.col_groups = RnnCeil(p.cols, 4);
  p.k = backward ? G * H : H;
  p.rounds = RnnCeil(p.k, 32);
  p.k_parts = std::max<int64_t>(1, kRnnWarps / p.col_groups);
  const int64_t slice_bytes = RnnAlign(p.slice_elems() * p.wbytes);
  const int64_t bias_bytes = RnnAlign(p.cols4() * 4);
  // Batch tiles of 1, 2, 4 or 8 rows: the product is instantiated for those
  // (a tile's rows past the batch are zeros).
  int64_t tile = 1;
  while (tile < kRnnMaxBatchTile && tile < d.batch) tile *= 2;
  auto fits = [&](int64_t weights, int64_t rows) {
    return weights + RnnAlign(rows * p.k_padded() * 4) + RnnAlign(p.k_parts * rows * p.cols4() * 4) +
               bias_bytes <=
           dev.smem_optin;
  };
  // Resident where the slice and at least a few rows fit; else the slice
  // streams from the workspace (L2) every step and the rows take the room.
  p.resident = fits(slice_bytes, std::min<int64_t>(tile, 4));
  const int64_t weights = p.resident ? slice_bytes : 0;
  int64_t rows = tile;
  while (rows > 1 && !fits(weights, rows)) rows /= 2;
  if (!fits(weights, rows)) {
    p.why = "the hidden size is too large for one row of the product in shared memory";
    return p;
  }
  p.batch_tile = rows;
  p.smem_a = weights;
  p.smem_red = p.smem_a + RnnAlign(rows * p.k_padded() * 4);
  p.smem_bias = p.smem_red + RnnAlign(p.k_parts * rows * p.cols4() * 4);
  p.smem_bytes = p.smem_bias + bias_bytes;

  const int64_t all_slices = RnnAlign(p.ctas * p.slice_elems() * p.wbytes);
  const int64_t exchange = RnnAlign(2 * d.batch * p.k * 4);
  const int64_t state = backward ? RnnAlign(3 * d.batch * H * 4) : 0;
  p.ws_exchange = all_slices;
  p.ws_state = p.ws_exchange + exchange;
  p.ws_counter = p.ws_state + state;
  p.ws_bytes = p.ws_counter + 256;
  p.ok = true;
  return p;
}

}  // namespace jaxdnn::recurrent
