// The memory-bound kernels around the sm90 convolutions (conv_sm90_aux.h).
#include "conv/sm90/conv_sm90_aux.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "common/activation.h"
#include "common/cuda_vec.cuh"

namespace jaxdnn::conv::sm90 {
namespace {

constexpr int kTile = 32;  // transpose tiles: 32 x 32 words, 32 x 8 threads

// bias[c] of dtype float32, bfloat16, float16 or float64, as float32.
__device__ float BiasAt(const void* bias, ffi::DataType dtype, int c) {
  switch (dtype) {
    case ffi::DataType::BF16: return __uint_as_float(uint32_t(static_cast<const uint16_t*>(bias)[c]) << 16);
    case ffi::DataType::F16: return __half2float(__ushort_as_half(static_cast<const uint16_t*>(bias)[c]));
    case ffi::DataType::F64: return float(static_cast<const double*>(bias)[c]);
    default: return static_cast<const float*>(bias)[c];
  }
}

// One 32x32 (C_out block, C_in block) tile of one tap per block, moved as raw
// 16-bit words; blocks of the first C_in block and tap also widen bias[co].
__global__ void PackWeightsKernel(const uint16_t* __restrict__ w, uint16_t* __restrict__ wt, int taps,
                                  int cin, int cout, const void* bias, ffi::DataType bias_dtype,
                                  float* bias_out) {
  __shared__ uint16_t tile[kTile][kTile + 1];
  const int tap = blockIdx.z, co0 = blockIdx.x * kTile, ci0 = blockIdx.y * kTile;
  for (int r = threadIdx.y; r < kTile; r += blockDim.y) {
    const int ci = ci0 + r, co = co0 + threadIdx.x;
    if (ci < cin && co < cout) tile[r][threadIdx.x] = w[(int64_t(tap) * cin + ci) * cout + co];
  }
  __syncthreads();
  for (int r = threadIdx.y; r < kTile; r += blockDim.y) {
    const int co = co0 + r, ci = ci0 + threadIdx.x;
    if (co < cout && ci < cin) wt[(int64_t(co) * taps + tap) * cin + ci] = tile[threadIdx.x][r];
  }
  const int co = co0 + threadIdx.x;
  if (bias_out != nullptr && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.y == 0 && co < cout) {
    bias_out[co] = BiasAt(bias, bias_dtype, co);
  }
}

__global__ void WidenBiasKernel(const void* bias, ffi::DataType dtype, float* out, int channels) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < channels) out[c] = BiasAt(bias, dtype, c);
}

// The transpose back: each thread sums its (co, ci) over the parts in order,
// then the tile turns so that dw's stores run along C_out.
__global__ void UnpackWeightGradKernel(const float* __restrict__ partials, int parts, int64_t part_elems,
                                       uint16_t* __restrict__ dw, bool half, int taps, int cin, int cout,
                                       float alpha) {
  __shared__ float tile[kTile][kTile + 1];
  const int tap = blockIdx.z, co0 = blockIdx.x * kTile, ci0 = blockIdx.y * kTile;
  for (int r = threadIdx.y; r < kTile; r += blockDim.y) {
    const int co = co0 + r, ci = ci0 + threadIdx.x;
    if (co < cout && ci < cin) {
      const float* src = partials + (int64_t(co) * taps + tap) * cin + ci;
      float s = 0.0f;
      for (int p = 0; p < parts; ++p) s += src[p * part_elems];
      tile[r][threadIdx.x] = alpha * s;
    }
  }
  __syncthreads();
  for (int r = threadIdx.y; r < kTile; r += blockDim.y) {
    const int ci = ci0 + r, co = co0 + threadIdx.x;
    if (ci < cin && co < cout) {
      const float v = tile[threadIdx.x][r];
      dw[(int64_t(tap) * cin + ci) * cout + co] =
          half ? __half_as_ushort(__float2half_rn(v)) : __bfloat16_as_ushort(__float2bfloat16_rn(v));
    }
  }
}

constexpr int kPrepassThreads = 256;

// The pre-pass's thread layout: a block covers `vecs` 8-channel vectors of a
// row, kPrepassThreads / vecs rows per pass, rows_per_block rows in all.
struct PrepassLayout {
  int vecs, rows_per_pass, col_chunks;
};

PrepassLayout LayoutOf(int channels) {
  PrepassLayout l;
  const int per_row = channels / 8;
  l.vecs = std::min(per_row, kPrepassThreads);
  l.rows_per_pass = kPrepassThreads / l.vecs;
  l.col_chunks = (per_row + l.vecs - 1) / l.vecs;
  return l;
}

// 8 values times beta into dres (float32, bfloat16 or float16) at element e.
__device__ void StoreScaled8(void* dres, ffi::DataType dtype, int64_t e, const float* g, float beta) {
  float v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = beta * g[i];
  switch (dtype) {
    case ffi::DataType::F32: {
      uint4* q = reinterpret_cast<uint4*>(static_cast<float*>(dres) + e);
      q[0] = Vec16<float>::Pack(v);
      q[1] = Vec16<float>::Pack(v + 4);
      break;
    }
    case ffi::DataType::F16:
      *reinterpret_cast<uint4*>(static_cast<__half*>(dres) + e) = Vec16<__half>::Pack(v);
      break;
    default: *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(dres) + e) = Vec16<__nv_bfloat16>::Pack(v);
  }
}

template <class T, Act A>
__global__ void __launch_bounds__(kPrepassThreads)
    PrepassKernel(Prepass p, PrepassLayout l, int64_t rows_per_block) {
  const int t = threadIdx.x, vc = t % l.vecs, rl = t / l.vecs;
  const int v = blockIdx.x * l.vecs + vc;
  const bool active = rl < l.rows_per_pass && v * 8 < p.channels;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_block, r1 = min(p.rows, r0 + rows_per_block);
  const T* dy = static_cast<const T*>(p.dy);
  const T* saved = static_cast<const T*>(p.saved);
  float sum[8] = {};
  if (active) {
    for (int64_t r = r0 + rl; r < r1; r += l.rows_per_pass) {
      const int64_t e = r * p.channels + v * 8;
      float g[8];
      Vec16<T>::Unpack(__ldg(reinterpret_cast<const uint4*>(dy + e)), g);
      if constexpr (A != Act::kIdentity) {
        float s[8];
        Vec16<T>::Unpack(__ldg(reinterpret_cast<const uint4*>(saved + e)), s);
#pragma unroll
        for (int i = 0; i < 8; ++i) g[i] = Backprop<A>(s[i], g[i], p.act_param);
      }
      if (p.dz != nullptr) *reinterpret_cast<uint4*>(static_cast<T*>(p.dz) + e) = Vec16<T>::Pack(g);
      if (p.dres != nullptr) StoreScaled8(p.dres, p.dres_dtype, e, g, p.beta);
#pragma unroll
      for (int i = 0; i < 8; ++i) sum[i] += g[i];
    }
  }
  if (p.bias_partials == nullptr) return;
  // The block's rows per column, summed over the row lanes in lane order.
  __shared__ float red[kPrepassThreads * 8];
#pragma unroll
  for (int i = 0; i < 8; ++i) red[t * 8 + i] = sum[i];
  __syncthreads();
  if (t < l.vecs && v * 8 < p.channels) {
    float total[8] = {};
    for (int k = 0; k < l.rows_per_pass; ++k) {
#pragma unroll
      for (int i = 0; i < 8; ++i) total[i] += red[(k * l.vecs + t) * 8 + i];
    }
    uint4* out = reinterpret_cast<uint4*>(p.bias_partials + int64_t(blockIdx.y) * p.channels + v * 8);
    out[0] = Vec16<float>::Pack(total);
    out[1] = Vec16<float>::Pack(total + 4);
  }
}

__global__ void FinishBiasGradKernel(const float* __restrict__ partials, int row_blocks, int channels,
                                     void* dbias, ffi::DataType dtype) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  float s = 0.0f;
  for (int b = 0; b < row_blocks; ++b) s += partials[int64_t(b) * channels + c];
  switch (dtype) {
    case ffi::DataType::F32: static_cast<float*>(dbias)[c] = s; break;
    case ffi::DataType::F16: static_cast<__half*>(dbias)[c] = __float2half_rn(s); break;
    default: static_cast<__nv_bfloat16*>(dbias)[c] = __float2bfloat16_rn(s);
  }
}

template <class T>
cudaError_t LaunchPrepass(const Prepass& p, cudaStream_t stream) {
  const PrepassLayout l = LayoutOf(p.channels);
  const int row_blocks = BiasRowBlocks(p.rows, p.channels);
  const int64_t rows_per_block = (p.rows + row_blocks - 1) / row_blocks;
  const dim3 grid(unsigned(l.col_chunks), unsigned(row_blocks));
  const bool known = ByAct(p.act, [&](auto act) {
    constexpr Act A = decltype(act)::value;
    PrepassKernel<T, A><<<grid, kPrepassThreads, 0, stream>>>(p, l, rows_per_block);
  });
  if (!known) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace

cudaError_t PackWeightsKMajor(const void* w, void* wt, int taps, int cin, int cout, const void* bias,
                              ffi::DataType bias_dtype, float* bias_out, cudaStream_t stream) {
  const dim3 grid((cout + kTile - 1) / kTile, (cin + kTile - 1) / kTile, taps);
  PackWeightsKernel<<<grid, dim3(kTile, 8), 0, stream>>>(static_cast<const uint16_t*>(w),
                                                         static_cast<uint16_t*>(wt), taps, cin, cout, bias,
                                                         bias_dtype, bias_out);
  return cudaGetLastError();
}

cudaError_t WidenBias(const void* bias, ffi::DataType bias_dtype, float* out, int channels,
                      cudaStream_t stream) {
  WidenBiasKernel<<<(channels + 255) / 256, 256, 0, stream>>>(bias, bias_dtype, out, channels);
  return cudaGetLastError();
}

cudaError_t UnpackWeightGrad(const float* partials, int parts, int64_t part_elems, void* dw, bool half,
                             int taps, int cin, int cout, float alpha, cudaStream_t stream) {
  const dim3 grid((cout + kTile - 1) / kTile, (cin + kTile - 1) / kTile, taps);
  UnpackWeightGradKernel<<<grid, dim3(kTile, 8), 0, stream>>>(
      partials, parts, part_elems, static_cast<uint16_t*>(dw), half, taps, cin, cout, alpha);
  return cudaGetLastError();
}

int BiasRowBlocks(int64_t rows, int channels) {
  const PrepassLayout l = LayoutOf(channels);
  // About 1024 blocks in all (several per SM, enough bytes in flight), each
  // with at least 4 passes so its reduction stays a small part of it.
  const int64_t target = std::max(1, 1024 / l.col_chunks);
  const int64_t useful = std::max<int64_t>(1, rows / (4 * l.rows_per_pass));
  return int(std::min(target, useful));
}

cudaError_t RunPrepass(const Prepass& p, cudaStream_t stream) {
  if (p.rows == 0) return cudaSuccess;
  return p.half ? LaunchPrepass<__half>(p, stream) : LaunchPrepass<__nv_bfloat16>(p, stream);
}

cudaError_t FinishBiasGrad(const float* bias_partials, int row_blocks, int channels, void* dbias,
                           ffi::DataType dbias_dtype, cudaStream_t stream) {
  FinishBiasGradKernel<<<(channels + 255) / 256, 256, 0, stream>>>(bias_partials, row_blocks, channels, dbias,
                                                                   dbias_dtype);
  return cudaGetLastError();
}

}  // namespace jaxdnn::conv::sm90
