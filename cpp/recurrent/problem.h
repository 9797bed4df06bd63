// The recurrent family's problem: one direction of one layer over the
// projected inputs (the input GEMM runs in XLA, every step at once).
//   forward:  gx [T, B, G*H], w_hh [H, G*H], b_hh [G*H], h0 [B, H], c0, lengths [B]
//          -> out [T, B, H], h_n [B, H], c_n, saved [T, B, S], c_seq
//   backward: dout, dh_n, dc_n, w_hh, h0, c0, lengths, out, saved, c_seq
//          -> dgx [T, B, G*H], dh0 [B, H], dc0
// The weight gradients are not the recurrence's: they are one GEMM over all
// steps (jaxdnn/recurrent/api.py, from dgx and the previous states).
// c0, c_n, c_seq, dc_n and dc0 are [B, H] / [T, B, H] for the LSTM and empty
// otherwise; saved holds the LSTM's (i, f, g, o) and the GRU's (r, z, n,
// h W_hn + b_hn) per step (S = 4H), nothing for the plain RNN (whose
// derivative comes from out). Steps at or past an example's length leave its
// state alone and output zeros. Everything float32; gate order cuDNN's.
#pragma once

#include <cstdint>

namespace jaxdnn::recurrent {

enum class RnnMode : int32_t { kLstm = 0, kGru = 1, kTanh = 2, kRelu = 3 };

inline int GatesOf(RnnMode m) { return m == RnnMode::kLstm ? 4 : m == RnnMode::kGru ? 3 : 1; }
inline int SavedPerHidden(RnnMode m) { return m == RnnMode::kLstm || m == RnnMode::kGru ? 4 : 0; }

struct RnnDims {
  int64_t steps = 0, batch = 0, hidden = 0;
};

struct RnnFwdArgs {
  RnnMode mode;
  RnnDims d;
  const float* gx;
  const float* w_hh;
  const float* b_hh;
  const float* h0;
  const float* c0;  // LSTM only
  const int32_t* lengths;
  float* out;
  float* h_n;
  float* c_n;    // LSTM only
  float* saved;  // LSTM, GRU
  float* c_seq;  // LSTM only
};

struct RnnBwdArgs {
  RnnMode mode;
  RnnDims d;
  const float* dout;
  const float* dh_n;
  const float* dc_n;  // LSTM only
  const float* w_hh;
  const float* h0;
  const float* c0;  // LSTM only
  const int32_t* lengths;
  const float* out;
  const float* saved;
  const float* c_seq;
  float* dgx;
  float* dh0;
  float* dc0;  // LSTM only
};

}  // namespace jaxdnn::recurrent
