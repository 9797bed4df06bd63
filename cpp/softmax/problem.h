// The softmax family's problem, shared by the CPU and CUDA paths: softmax or
// log-softmax over the last axis of x (rows x cols), optionally over only the
// entries a boolean `where` keeps, in float32 and rounded to x's dtype.
//   forward:  y = exp(x - m) / s            (log: (x - m) - log s)
//   backward: dx = y * (dy - sum(dy * y))   (log: dy - exp(y) * sum(dy))
// with m the row's maximum and s = sum exp(x - m), both over kept entries.
// Entries `where` drops give 0 (log: -inf) forward and 0 backward, as
// jax.nn's. A row with nothing kept is all 0 (log: -inf).
#pragma once

#include <cstdint>

#include "common/ffi_util.h"

namespace jaxdnn::softmax {

struct SoftmaxShape {
  int64_t rows = 0, cols = 0;
};

struct SoftmaxFwdArgs {
  SoftmaxShape shape;
  ffi::DataType dtype;  // float32, bfloat16 or float16
  bool log = false;
  const void* x = nullptr;
  const bool* where = nullptr;  // null: every entry kept
  void* y = nullptr;
};

struct SoftmaxBwdArgs {
  SoftmaxShape shape;
  ffi::DataType dtype;
  bool log = false;
  const void* y = nullptr;  // the forward's output
  const void* dy = nullptr;
  const bool* where = nullptr;
  void* dx = nullptr;
};

// Buffer order (the Python primitives follow it):
//   forward  args: x, [where]      rets: y
//   backward args: y, dy, [where]  rets: dx
// every buffer [..., cols] of one shape; where is bool. Attributes: log,
// masked (whether `where` is passed), both int32 0/1.
ffi::ErrorOr<SoftmaxFwdArgs> ReadFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, bool log,
                                         bool masked);
ffi::ErrorOr<SoftmaxBwdArgs> ReadBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, bool log,
                                         bool masked);

}  // namespace jaxdnn::softmax
