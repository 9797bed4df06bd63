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
#include "common/host_device.h"

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

// Cross-entropy over the last axis with integer labels, per row r (label y):
//   lse  = m + log sum exp(x - m)
//   loss = lse - (1 - eps) x_y - eps mean(x) + z lse^2   (the eps term only when eps > 0)
//   dx_j = g_r (p_j (1 + 2 z lse) - (1 - eps) [j == y] - eps / cols),  p_j = exp(x_j - lse)
// eps = label_smoothing, z = z_loss, g the loss's cotangent. A row whose
// label is ignore_index has loss 0 and gradient 0; a label outside
// [0, cols) otherwise gives NaN loss and gradient.
struct CrossEntropyFwdArgs {
  SoftmaxShape shape;
  ffi::DataType dtype;
  float smoothing = 0.f, z_loss = 0.f;
  bool has_ignore = false;
  int32_t ignore_index = 0;
  const void* logits = nullptr;
  const int32_t* labels = nullptr;  // [rows]
  float* loss = nullptr;            // [rows]
  float* lse = nullptr;             // [rows]
};

struct CrossEntropyBwdArgs {
  SoftmaxShape shape;
  ffi::DataType dtype;
  float smoothing = 0.f, z_loss = 0.f;
  bool has_ignore = false;
  int32_t ignore_index = 0;
  const void* logits = nullptr;
  const int32_t* labels = nullptr;
  const float* lse = nullptr;  // the forward's
  const float* g = nullptr;    // [rows]
  void* dlogits = nullptr;
};

// Cross-entropy against probability targets q (a row of the logits' shape
// and dtype), per row r, eps = label_smoothing, z = z_loss:
//   q'_j = (1 - eps) q_j + eps / cols,   S = sum q' = (1 - eps) sum q + eps
//   loss = lse S - sum q'_j x_j + z lse^2        (products taken entry by entry)
//   dx_j = a_r p_j - b_r q'_j,  a_r = g_r (S + 2 z lse), b_r = g_r
// The forward also writes sum q (the backward's S); Python forms a and b.
struct SoftCrossEntropyFwdArgs {
  SoftmaxShape shape;
  ffi::DataType dtype;
  float smoothing = 0.f, z_loss = 0.f;
  const void* logits = nullptr;
  const void* targets = nullptr;  // logits' shape and dtype
  float* loss = nullptr;          // [rows]
  float* lse = nullptr;           // [rows]
  float* target_sum = nullptr;    // [rows]
};

struct SoftCrossEntropyBwdArgs {
  SoftmaxShape shape;
  ffi::DataType dtype;
  float smoothing = 0.f;
  const void* logits = nullptr;
  const void* targets = nullptr;
  const float* lse = nullptr;  // [rows], the forward's
  const float* a = nullptr;    // [rows]
  const float* b = nullptr;    // [rows]
  void* dlogits = nullptr;
};

// Whether row r's label counts, is ignored, or is invalid.
enum class LabelKind { kValid, kIgnored, kInvalid };
JAXDNN_HD LabelKind KindOf(int32_t y, int64_t cols, bool has_ignore, int32_t ignore_index) {
  if (has_ignore && y == ignore_index) return LabelKind::kIgnored;
  return y >= 0 && y < cols ? LabelKind::kValid : LabelKind::kInvalid;
}

// Buffer order (the Python primitives follow it):
//   forward  args: x, [where]      rets: y
//   backward args: y, dy, [where]  rets: dx
// every buffer [..., cols] of one shape; where is bool. Attributes: log,
// masked (whether `where` is passed), both int32 0/1.
ffi::ErrorOr<SoftmaxFwdArgs> ReadFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, bool log,
                                         bool masked);
ffi::ErrorOr<SoftmaxBwdArgs> ReadBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, bool log,
                                         bool masked);

// Cross-entropy buffers: forward args logits [..., cols], labels [...] int32;
// rets loss, lse [...] float32. Backward args logits, labels, lse, g; ret
// dlogits (logits' shape and dtype). Attributes: label_smoothing, z_loss
// (float32), has_ignore, ignore_index (int32).
struct CrossEntropyAttrs {
  float smoothing, z_loss;
  bool has_ignore;
  int32_t ignore_index;
};
ffi::ErrorOr<CrossEntropyFwdArgs> ReadCrossEntropyFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                                          const CrossEntropyAttrs& attrs);
ffi::ErrorOr<CrossEntropyBwdArgs> ReadCrossEntropyBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                                          const CrossEntropyAttrs& attrs);

// Probability targets: forward args logits, targets (one shape and dtype);
// rets loss, lse, target_sum [...] float32. Backward args logits, targets,
// lse, a, b; ret dlogits. Attributes: label_smoothing, z_loss (float32).
ffi::ErrorOr<SoftCrossEntropyFwdArgs> ReadSoftCrossEntropyFwdCall(ffi::RemainingArgs args,
                                                                  ffi::RemainingRets rets, float smoothing,
                                                                  float z_loss);
ffi::ErrorOr<SoftCrossEntropyBwdArgs> ReadSoftCrossEntropyBwdCall(ffi::RemainingArgs args,
                                                                  ffi::RemainingRets rets, float smoothing);

}  // namespace jaxdnn::softmax
