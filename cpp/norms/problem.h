// The norm family's problem description, shared by the CPU and CUDA paths.
//
// x has shape [*leading, dim]; its rows are the flattened leading dims. The
// scale/bias have shape [*groups, dim] where `groups` is a prefix of the
// leading dims (empty unless vmap batched the parameters), so rows are split
// into `groups` contiguous runs that each use their own scale row. They are
// float32, or (`params16`) both in x's 16-bit dtype: the kernels convert them
// to float32 as they load them, and write dscale/dbias in the same dtype.
#pragma once

#include <cstdint>
#include <string>

#include "common/ffi_util.h"

#if defined(__CUDACC__)
#define JAXDNN_HOST_DEVICE __host__ __device__
#else
#define JAXDNN_HOST_DEVICE
#endif

namespace jaxdnn::norms {

enum class NormKind : int32_t { kLayer = 0, kRms = 1 };

struct NormShape {
  int64_t rows = 0;
  int64_t dim = 0;
  int64_t groups = 1;
  JAXDNN_HOST_DEVICE int64_t rows_per_group() const { return groups ? rows / groups : 0; }
};

// "(rows x dim, groups G)": the shape in error messages.
inline std::string ShapeText(const NormShape& s) {
  return "(" + std::to_string(s.rows) + " x " + std::to_string(s.dim) + ", groups " +
         std::to_string(s.groups) + ")";
}

// Forward: z = x (+ residual); y = normalize(z) * scale (+ bias).
struct NormFwdArgs {
  NormKind kind;
  float epsilon;
  NormShape shape;
  ffi::DataType dtype;
  const void* x;
  const void* residual;  // null when no residual is fused
  const void* scale;     // [groups, dim], float32 or (params16) x's dtype
  const void* bias;      // [groups, dim], scale's dtype; null for RMSNorm
  void* y;
  void* z;                  // residual sum, written only when residual != null
  float* mean;              // [rows]; null for RMSNorm
  float* rstd;              // [rows]
  bool stream_rows = true;  // CUDA: evict-first row accesses (RowCachePolicy)
  bool params16 = false;    // scale and bias in x's 16-bit dtype, not float32
};

// Backward from the saved z, mean and rstd:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (+ dsum), g = dy * scale;
// dscale = sum_rows dy * xhat, dbias = sum_rows dy (per group).
struct NormBwdArgs {
  NormKind kind;
  NormShape shape;
  ffi::DataType dtype;
  const void* dy;
  const void* z;
  const void* scale;  // [groups, dim], float32 or (params16) x's dtype
  const float* mean;  // null for RMSNorm
  const float* rstd;
  const void* dsum;  // cotangent of the residual sum; may be null
  void* dx;
  void* dscale;     // [groups, dim], scale's dtype
  void* dbias;      // [groups, dim], scale's dtype; null for RMSNorm
  float* partials;  // CUDA workspace [groups, num_partials, 2, dim]; null on CPU
  int64_t num_partials;
  bool stream_rows = true;  // CUDA: evict-first row accesses (RowCachePolicy)
  bool params16 = false;    // scale, dscale and dbias in x's 16-bit dtype, not float32
};

// Buffer order (the Python primitives follow it):
//   fwd args: x, [residual], scale, [bias]        rets: y, [z], [mean], rstd
//   bwd args: dy, z, scale, [mean], rstd, [dsum]  rets: dx, dscale, [dbias], [workspace]
// Bracketed entries are present for LayerNorm (bias, mean, dbias), when a
// residual is fused (residual, z, dsum), and on CUDA (workspace).
ffi::ErrorOr<NormFwdArgs> ReadFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t kind,
                                      bool residual, float epsilon);
ffi::ErrorOr<NormBwdArgs> ReadBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t kind,
                                      bool residual, bool has_workspace);

}  // namespace jaxdnn::norms
