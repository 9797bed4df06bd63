// The CNN norms' problems, shared by the CPU and CUDA paths. GroupNorm (and
// InstanceNorm, one channel a group) over channels-last x viewed as
// [N, S, C] (S the spatial positions), G groups of C / G channels: per
// sample n and group g, over its S x C / G entries, in float32,
//   mean, rstd = 1 / sqrt(var + epsilon)        (var biased, two-pass)
//   xhat = (x - mean) rstd,  z = xhat scale[n, c] + bias[n, c] (+ residual)
//   y = act(z)
// and the backward, dz = act'(z) dy (the residual's gradient),
//   dscale[n, c] = sum_s dz xhat, dbias[n, c] = sum_s dz  (per sample: Python
//   sums over n, so vmap and per-example parameters come for free)
//   dxhat = dz scale,  dx = rstd (dxhat - mean_g(dxhat) - xhat mean_g(dxhat xhat)).
// The parameters are per sample ([N, C], float32; Python broadcasts shared ones).
#pragma once

#include <cstdint>

#include "common/ffi_util.h"
#include "common/host_device.h"

namespace jaxdnn::cnn_norms {

struct GroupShape {
  int64_t samples = 0, positions = 0, channels = 0, groups = 1;
  JAXDNN_HD int64_t per_group() const { return channels / groups; }
};

struct GroupNormAttrs {
  int64_t groups = 1;
  float epsilon = 1e-5f;
  int32_t act = 0;  // common/activation.h's Act
  float param = 0.f;
  bool has_residual = false;
};

struct GroupNormFwdArgs {
  GroupShape shape;
  ffi::DataType dtype;
  GroupNormAttrs attrs;
  const void* x = nullptr;
  const float* scale = nullptr;  // [N, C]
  const float* bias = nullptr;   // [N, C]
  const void* residual = nullptr;
  void* y = nullptr;
  float* mean = nullptr;       // [N, G]
  float* rstd = nullptr;       // [N, G]
  float* workspace = nullptr;  // CUDA (sm80/group_norm_launch.h)
  int64_t workspace_elems = 0;
};

struct GroupNormBwdArgs {
  GroupShape shape;
  ffi::DataType dtype;
  GroupNormAttrs attrs;
  const void* dy = nullptr;
  const void* x = nullptr;
  const float* scale = nullptr;
  const float* bias = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  const void* residual = nullptr;
  void* dx = nullptr;
  float* dscale = nullptr;  // [N, C]
  float* dbias = nullptr;   // [N, C]
  void* dresidual = nullptr;
  float* workspace = nullptr;  // CUDA
  int64_t workspace_elems = 0;
};

// Buffer order (the Python primitives follow it); x is [N, S * C] and the
// attributes carry channels (C) and groups (G):
//   forward  args: x, scale, bias, [residual]                  rets: y, mean, rstd
//   backward args: dy, x, scale, bias, mean, rstd, [residual]  rets: dx, dscale, dbias, [dresidual]
// CUDA adds a float32 workspace as the last result.
ffi::ErrorOr<GroupNormFwdArgs> ReadGroupNormFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                                    int64_t channels, const GroupNormAttrs& attrs,
                                                    bool with_workspace = false);
ffi::ErrorOr<GroupNormBwdArgs> ReadGroupNormBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                                    int64_t channels, const GroupNormAttrs& attrs,
                                                    bool with_workspace = false);

}  // namespace jaxdnn::cnn_norms

// The group norm handlers' binding, on the platform context CONTEXT.
#define JAXDNN_GN_BIND(CONTEXT)  \
  ::xla::ffi::Ffi::Bind()        \
      .Ctx<CONTEXT>()            \
      .RemainingArgs()           \
      .RemainingRets()           \
      .Attr<int64_t>("channels") \
      .Attr<int64_t>("groups")   \
      .Attr<float>("epsilon")    \
      .Attr<int32_t>("act")      \
      .Attr<float>("param")      \
      .Attr<int32_t>("residual")
