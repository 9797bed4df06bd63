// The memory-bound kernels around the sm90 convolutions' CUTLASS GEMMs:
// the weights packed K-major (forward and data gradient), the bias widened
// to float32 (the 1x1 forward GEMM), the weights unpacked from
// the weight gradient's partials, and the gradients' pre-pass (dz =
// act'(saved) * dy, the residual gradient beta * dz and the bias gradient's
// column sums). Each is deterministic: fixed work split, fixed summation order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/ffi_util.h"

namespace jaxdnn::conv::sm90 {

// w [taps, C_in, C_out] -> wt [C_out, taps, C_in] (16-bit words); where
// bias_out is not null, also bias[co] widened to float32 into it.
cudaError_t PackWeightsKMajor(const void* w, void* wt, int taps, int cin, int cout, const void* bias,
                              ffi::DataType bias_dtype, float* bias_out, cudaStream_t stream);

// bias[c] (float32, bfloat16, float16 or float64) widened to float32 into
// out, for c < channels (the 1x1 GEMM's bias where it is not float32 or
// not 16-byte aligned).
cudaError_t WidenBias(const void* bias, ffi::DataType bias_dtype, float* out, int channels,
                      cudaStream_t stream);

// dw[tap][ci][co] = alpha * sum over p < parts, in order, of
// partials[p][co][tap][ci] (float32), rounded to float16 (half) or bfloat16.
cudaError_t UnpackWeightGrad(const float* partials, int parts, int64_t part_elems, void* dw, bool half,
                             int taps, int cin, int cout, float alpha, cudaStream_t stream);

// The gradients' pre-pass over dy [rows, C] (rows = N * output positions;
// C a multiple of 8; 16-bit dy of dtype half ? float16 : bfloat16):
//   dz = act'(saved) * dy          into dz (dy's dtype) where not null
//   beta * dz                      into dres (dres_dtype) where not null
//   column sums of dz per block    into bias_partials [BiasRowBlocks][C]
struct Prepass {
  const void* dy = nullptr;
  const void* saved = nullptr;  // y or z (dy's dtype); null without an activation
  void* dz = nullptr;
  void* dres = nullptr;
  ffi::DataType dres_dtype = ffi::DataType::INVALID;
  float* bias_partials = nullptr;
  int64_t rows = 0;
  int channels = 0;
  int act = 0;
  float act_param = 0.0f, beta = 1.0f;
  bool half = false;
};

// The row blocks the bias sums are cut into (a function of the shape only,
// so the sums' order never changes between calls).
int BiasRowBlocks(int64_t rows, int channels);
cudaError_t RunPrepass(const Prepass& p, cudaStream_t stream);

// dbias[c] = sum over the row blocks, in order, of bias_partials[b][c], stored
// in dbias_dtype (float32, bfloat16 or float16).
cudaError_t FinishBiasGrad(const float* bias_partials, int row_blocks, int channels, void* dbias,
                           ffi::DataType dbias_dtype, cudaStream_t stream);

}  // namespace jaxdnn::conv::sm90
