// The activations family's problems, shared by the CPU and CUDA paths. Both
// ops see their operands as rows x cols, computed in float32 and rounded to
// the input dtype.
//   bias_act: y = f(x + bias), bias [cols] broadcast over rows (optional);
//             dx = f'(x + bias) * dy, dbias = column sums of dx (float32).
//   glu:      out = value * f(gate), value and gate each rows x cols, at
//             `in_stride` elements between rows (2 * cols when both halves
//             of one array [rows, 2, cols] are split, cols when separate);
//             dvalue = dout * f(gate), dgate = f'(gate) * dout * value.
#pragma once

#include <cstdint>

#include "common/ffi_util.h"

namespace jaxdnn::activations {

struct Shape {
  int64_t rows = 0, cols = 0;
};

struct BiasActFwdArgs {
  Shape shape;
  ffi::DataType dtype;  // x's and y's: float32, bfloat16 or float16
  int32_t act = 0;      // activations::Act
  float param = 0.f;
  const void* x = nullptr;
  const float* bias = nullptr;  // [cols] float32; null: no bias
  void* y = nullptr;
};

struct BiasActBwdArgs {
  Shape shape;
  ffi::DataType dtype;
  int32_t act = 0;
  float param = 0.f;
  const void* dy = nullptr;
  const void* x = nullptr;
  const float* bias = nullptr;  // null: no bias, no dbias
  void* dx = nullptr;
  float* dbias = nullptr;     // [cols], with bias
  float* partials = nullptr;  // CUDA workspace [plan.partials, cols], with bias
  int64_t workspace_elems = 0;
};

struct GluFwdArgs {
  Shape shape;  // of the output
  ffi::DataType dtype;
  int32_t act = 0;
  float param = 0.f;
  int64_t in_stride = 0;  // elements between rows of value and of gate
  const void* value = nullptr;
  const void* gate = nullptr;  // value + cols when split from one array
  void* out = nullptr;
};

struct GluBwdArgs {
  Shape shape;
  ffi::DataType dtype;
  int32_t act = 0;
  float param = 0.f;
  int64_t in_stride = 0;  // of value, gate, dvalue and dgate
  const void* dout = nullptr;
  const void* value = nullptr;
  const void* gate = nullptr;
  void* dvalue = nullptr;
  void* dgate = nullptr;
};

// Buffer order (the Python primitives follow it); attributes act, param,
// has_bias (bias_act) or split (glu), all int32 but param (float32):
//   bias_act forward  args: x [..., cols], [bias f32 [cols]]        rets: y
//   bias_act backward args: dy, x, [bias]                           rets: dx, [dbias f32 [cols]],
//                                                                         [CUDA: workspace f32]
//   glu forward  split args: x [..., 2 * cols]                      rets: out [..., cols]
//                separate    value, gate [..., cols]                rets: out
//   glu backward split args: dout, x                                rets: dx [..., 2 * cols]
//                separate    dout, value, gate                      rets: dvalue, dgate
// A split along another axis is this one on [outer, 2, inner] with rows =
// outer and cols = inner (Python passes the array reshaped so).
ffi::ErrorOr<BiasActFwdArgs> ReadBiasActFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                                                float param, bool has_bias);
ffi::ErrorOr<BiasActBwdArgs> ReadBiasActBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                                                float param, bool has_bias, bool with_workspace);
ffi::ErrorOr<GluFwdArgs> ReadGluFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                                        float param, bool split);
ffi::ErrorOr<GluBwdArgs> ReadGluBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                                        float param, bool split);

}  // namespace jaxdnn::activations
