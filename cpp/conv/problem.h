// Convolution over channels-last x viewed as [N, D, H, W, C_in] (1D and 2D
// inputs have unit leading spatial dims), weights [taps = window volume,
// C_in / groups, C_out], output [N, out D, H, W, C_out], shared by the CPU
// and CUDA paths. lax.conv_general_dilated's problem: output position o of
// spatial dim k reads the input-dilated, padded input at
//   p = o * stride[k] - pad_lo[k] + j * k_dilation[k],   tap j < window[k],
// which is input i = p / in_dilation[k] where p >= 0, p % in_dilation[k] == 0
// and i < in[k] (anything else is padding or a dilation hole: zero).
// Group gr = co / (C_out / groups) reads input channels gr * C_in/groups + ci.
//
// Epilogue (float32): z = alpha * conv + bias[co] + beta * residual,
// y = act(z) (common/activation.h). The forward saves z for the backward
// when the activation's derivative needs it (saved == kSavePreact); for
// relu and relu6 the derivative is a test on y (kSaveOutput), none without
// an activation (kSaveNothing). Backward, with dz = act'(saved) * dy:
//   dgrad: dx = conv's transpose of alpha * dz; d residual = beta * dz
//   wgrad: dw[tap, ci, co] = alpha * sum_{n, o} x[n, i(o, tap), ci] dz[n, o, co];
//          d bias = sum_{n, o} dz.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "common/ffi_util.h"

namespace jaxdnn::conv {

enum Saved : int32_t { kSaveNothing = 0, kSaveOutput = 1, kSavePreact = 2 };

// The algorithm a call asked for (jaxdnn/conv/api.py's codes); the CPU
// kernels run depthwise problems on a channel-vector loop unless told
// kImplicitGemm, and the forward on Winograd's F(4x4, 3x3) or F(2x2, 3x3)
// when told kWinograd (conv/cpu/winograd.h, conv/sm80/winograd_fwd.h).
enum Algorithm : int32_t { kAlgoAuto = 0, kAlgoImplicitGemm = 1, kAlgoDirect = 2, kAlgoWinograd = 3 };

struct ConvGeometry {
  int64_t batch = 0, in_channels = 0, out_channels = 0, groups = 1;
  int32_t algorithm = kAlgoAuto;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, window{1, 1, 1}, stride{1, 1, 1}, in_dilation{1, 1, 1},
      k_dilation{1, 1, 1}, pad_lo{0, 0, 0};
  int64_t in_positions() const { return in[0] * in[1] * in[2]; }
  int64_t out_positions() const { return out[0] * out[1] * out[2]; }
  int64_t taps() const { return window[0] * window[1] * window[2]; }
  int64_t cin_g() const { return in_channels / groups; }
  int64_t cout_g() const { return out_channels / groups; }
  int64_t weights() const { return taps() * cin_g() * out_channels; }
};

struct Epilogue {
  int32_t act = 0;
  float act_param = 0.0f, alpha = 1.0f, beta = 1.0f;
  int32_t saved = kSaveNothing;
  bool has_bias = false, has_residual = false;
};

struct ConvFwdArgs {
  ConvGeometry g;
  Epilogue e;
  ffi::DataType dtype;      // x's and w's
  ffi::DataType out_dtype;  // y's and z's
  ffi::DataType bias_dtype = ffi::DataType::INVALID, residual_dtype = ffi::DataType::INVALID;
  const void* x = nullptr;         // [N, in positions * C_in]
  const void* w = nullptr;         // [taps * C_in/groups * C_out]
  const void* bias = nullptr;      // [C_out] or null
  const void* residual = nullptr;  // [N, out positions * C_out] or null
  void* y = nullptr;               // [N, out positions * C_out]
  void* z = nullptr;               // kSavePreact: like y
  void* workspace = nullptr;       // CUDA: scratch XLA allocated (the plan's size)
  size_t workspace_bytes = 0;
};

struct ConvDgradArgs {
  ConvGeometry g;
  Epilogue e;
  ffi::DataType dtype;     // w's and dx's
  ffi::DataType dy_dtype;  // dy's and saved's
  ffi::DataType residual_dtype = ffi::DataType::INVALID;
  const void* dy = nullptr;
  const void* w = nullptr;
  const void* saved = nullptr;  // null for kSaveNothing
  void* dx = nullptr;
  void* dresidual = nullptr;  // null without a residual
  void* workspace = nullptr;  // CUDA: scratch XLA allocated (the plan's size)
  size_t workspace_bytes = 0;
};

struct ConvWgradArgs {
  ConvGeometry g;
  Epilogue e;
  ffi::DataType dtype;  // x's and dw's
  ffi::DataType dy_dtype;
  ffi::DataType bias_dtype = ffi::DataType::INVALID;
  const void* x = nullptr;
  const void* dy = nullptr;
  const void* saved = nullptr;
  void* dw = nullptr;
  void* dbias = nullptr;      // null without a bias
  void* workspace = nullptr;  // CUDA: scratch XLA allocated (the plan's size)
  size_t workspace_bytes = 0;
};

// Attributes: the geometry as int64 arrays of 3 (in_dims, out_dims, window,
// strides, in_dilation, k_dilation, pad_lo), in/out channels, groups, act,
// act_param, alpha, beta, saved, has_bias, has_residual, algorithm. Buffers:
//   forward  args x, w, [bias], [residual]   rets y, [z], [workspace u8]
//   dgrad    args dy, w, [saved]             rets dx, [d residual], [workspace u8]
//   wgrad    args x, dy, [saved]             rets dw, [d bias], [workspace u8]
ffi::ErrorOr<ConvFwdArgs> ReadConvFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                          const ConvGeometry& g, const Epilogue& e);
ffi::ErrorOr<ConvDgradArgs> ReadConvDgradCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                              const ConvGeometry& g, const Epilogue& e);
ffi::ErrorOr<ConvWgradArgs> ReadConvWgradCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                              const ConvGeometry& g, const Epilogue& e);

}  // namespace jaxdnn::conv
