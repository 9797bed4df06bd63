// BatchNorm over channels-last x viewed as [R, C] (R = batch x positions),
// in four steps so the cross-device sums can sit between them (one
// collective each way, taken by Python; every float operation is in the
// kernels, so a jitted and an eager call give the same bits):
//   stats:       s1[c] = sum_r (x - k[c]),  s2[c] = sum_r (x - k[c])^2
//                (k the shift: the running mean, so no cancellation when
//                the batch's mean is near it);
//   statistics of a channel (training):  d = s1 / n, mean = k + d,
//                var = max(s2 / n - d^2, 0); (inference): mean = k, var = the
//                running variance; rstd = 1 / sqrt(var + epsilon);
//   apply:       y = act((x - mean) rstd scale + bias + residual), and the
//                running statistics moved by momentum (training);
//   bwd reduce:  sum_dz[c] = sum_r dz,  sum_dzx[c] = sum_r dz xhat,
//                dz = act'(z) dy;
//   bwd apply:   dx = rstd scale (dz - t_dz / n - xhat t_dzx / n) (training;
//                t the totals over devices), rstd scale dz (inference);
//                dresidual = dz.
// With ReLU, the forward called for the gradient (attr mask) also writes the
// sign of z as bits (uint8 [R, C / 8], bit c % 8 of byte c / 8 set where
// z > 0: exactly relu's derivative) and the backward steps take those bits
// in place of the residual: dz = dy where the bit is set, else 0. The
// backward then reads no residual, and in inference no x either (ResNet's
// BN + residual + ReLU: backward 8 streams of the activation -> ~6 in
// training, 5 -> ~3 in inference).
// Per-channel vectors are float32 [C]; sums over rows run in fixed chunks
// added in chunk order (deterministic).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/ffi_util.h"
#include "common/host_device.h"

namespace jaxdnn::cnn_norms {

struct RowsShape {
  int64_t rows = 0, channels = 0;
};

struct BatchNormAttrs {
  int32_t act = 0;
  float param = 0.f;
  bool residual = false, training = true;
  float epsilon = 1e-5f, momentum = 0.99f;
  bool mask = false;  // ReLU's sign bits: written by apply, read by the backward
};

struct BatchNormArgs {
  RowsShape shape;
  ffi::DataType dtype;
  BatchNormAttrs attrs;
  const void* x = nullptr;
  const void* dy = nullptr;        // backward
  const void* residual = nullptr;  // optional
  const uint8_t* mask = nullptr;   // backward with attrs.mask: z > 0 bits
  uint8_t* mask_out = nullptr;     // apply with attrs.mask
  // Per channel: the shift (running mean) and, after stats, the sums s1, s2,
  // the row count n and the running variance.
  const float *shift = nullptr, *s1 = nullptr, *s2 = nullptr, *count = nullptr, *running_var = nullptr;
  const float *scale = nullptr, *bias = nullptr;
  const float *total_dz = nullptr, *total_dzx = nullptr;  // bwd apply
  void* y = nullptr;                                      // apply: y; bwd apply: dx
  void* dresidual = nullptr;                              // bwd apply, with a residual
  float *out1 = nullptr, *out2 = nullptr;  // stats: s1, s2; apply: new mean, var; bwd reduce: sums
  float* partials = nullptr;               // CUDA column sums' workspace
  int64_t workspace_elems = 0;
};

// A channel's mean and rstd from the step inputs (see above).
struct ChannelStats {
  float mean, var, rstd;
};
JAXDNN_HD ChannelStats StatsOf(const BatchNormArgs& p, int64_t c) {
  float mean = p.shift[c], var = p.running_var[c];
  if (p.attrs.training) {
    const float d = p.s1[c] / p.count[c];
    mean = p.shift[c] + d;
    var = p.s2[c] / p.count[c] - d * d;
    var = var > 0.f ? var : 0.f;
  }
  return {mean, var, 1.f / sqrtf(var + p.attrs.epsilon)};
}

enum class BatchNormStep : int32_t { kStats = 0, kApply = 1, kBwdReduce = 2, kBwdApply = 3 };

// The CUDA column sums' workspace: float32 [chunks, 2, C] partials, chunks
// from common/rows_plan.h's MakeColumnSumPlan (plan query
// "batch_norm_partials"); the CPU needs none.

// Buffers, x [R, C] and every per-channel vector float32 [C]; S stands for
// the five vectors shift, s1, s2, n, running_var:
//   stats       args x, shift                                    rets s1, s2
//   apply       args x, S, scale, bias, [residual]               rets y, new running mean, var, [mask]
//   bwd reduce  args dy, x, S, scale, bias, [residual | mask]    rets sum_dz, sum_dzx
//   bwd apply   args dy, x, S, scale, bias, t_dz, t_dzx, [residual | mask]  rets dx, [dresidual]
// (the mask in place of the residual when attrs.mask, with or without one).
ffi::ErrorOr<BatchNormArgs> ReadBatchNormCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                              BatchNormStep step, const BatchNormAttrs& attrs,
                                              bool with_workspace = false);

}  // namespace jaxdnn::cnn_norms

// The BatchNorm handlers' binding, on the platform context CONTEXT.
#define JAXDNN_BN_BIND(CONTEXT)  \
  ::xla::ffi::Ffi::Bind()        \
      .Ctx<CONTEXT>()            \
      .RemainingArgs()           \
      .RemainingRets()           \
      .Attr<int32_t>("act")      \
      .Attr<float>("param")      \
      .Attr<int32_t>("residual") \
      .Attr<int32_t>("training") \
      .Attr<float>("epsilon")    \
      .Attr<float>("momentum")   \
      .Attr<int32_t>("mask")
