// Channels-last rows for the elementwise and column-sum kernels (bias_act,
// glu, the CNN norms): a thread's share of a row is one 16-byte vector (kVec)
// or one element, loaded as raw bits first (several rows in flight), then
// unpacked to float32; the block's column sums reduced in a fixed order; and
// the dtype x activation dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/activation.h"
#include "common/rows_plan.h"
#include "common/cuda_vec.cuh"
#include "common/ffi_util.h"
#include "common/launch_status.h"

namespace jaxdnn {

template <typename T, bool kVec>
struct Pack {
  static constexpr int N = kVec ? Vec16<T>::kElems : 1;
  using Raw = std::conditional_t<kVec, uint4, T>;
  __device__ static Raw Load(const T* p) {
    if constexpr (kVec) {
      return LoadStream(p);
    } else {
      return *p;
    }
  }
  __device__ static void Unpack(const Raw& r, float* f) {
    if constexpr (kVec) {
      Vec16<T>::Unpack(r, f);
    } else {
      f[0] = Vec16<T>::Load1(&r);
    }
  }
  __device__ static void Store(T* p, const float* f) {
    if constexpr (kVec) {
      StoreStream(p, Vec16<T>::Pack(f));
    } else {
      Vec16<T>::Store1(p, f[0]);
    }
  }
};

// Rows each thread keeps in flight.
constexpr int kUnroll = 4;

// The raw loads of several operands of one row.
template <typename Raw, int kOperands>
struct Loads {
  Raw op[kOperands];
};

// use(r, load(r)) for the rows first, first + stride, ... below last, the
// loads of kUnroll rows issued before any of them is used, so a thread keeps
// kUnroll rows of loads in flight.
template <typename Raw, typename Load, typename Use>
__device__ __forceinline__ void WalkRows(int64_t first, int64_t last, int64_t stride, Load load, Use use) {
  for (int64_t r0 = first; r0 < last; r0 += stride * kUnroll) {
    Raw raw[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      if (r0 + k * stride < last) raw[k] = load(r0 + k * stride);
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      if (r0 + k * stride < last) use(r0 + k * stride, raw[k]);
    }
  }
}

inline dim3 Block(const GridPlan& g) { return dim3(unsigned(g.tx), unsigned(g.ty), 1); }
inline dim3 Grid(const GridPlan& g) { return dim3(unsigned(g.col_blocks), unsigned(g.row_blocks), 1); }

// launch(T{}, Act constant) for the runtime dtype and activation code; the
// call-frame readers admit only these.
template <typename Launch>
LaunchStatus ByDtypeAct(ffi::DataType dtype, int32_t act, Launch launch) {
  LaunchStatus status = LaunchStatus::Refused("no kernel for this activation code");
  auto with_type = [&](auto t) { ByAct(act, [&](auto a) { status = launch(t, a); }); };
  switch (dtype) {
    case ffi::DataType::F32: with_type(float{}); break;
    case ffi::DataType::BF16: with_type(__nv_bfloat16{}); break;
    case ffi::DataType::F16: with_type(__half{}); break;
    default: return LaunchStatus::Refused("no kernel for this dtype");
  }
  return status;
}

inline LaunchStatus Checked() { return cudaGetLastError(); }

// The block's sums of acc[k][e] over its threadIdx.y lanes, in lane order,
// written by lane 0 to out[k * stride + e] (k < K accumulators of the
// thread's N columns). `lanes` holds blockDim.x * blockDim.y * N floats;
// every thread of the block must call it.
template <int K, int N>
__device__ inline void BlockColumnSums(float (&acc)[K][N], float* lanes, bool live, float* out,
                                       int64_t stride) {
  const int lane = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
  for (int k = 0; k < K; ++k) {
#pragma unroll
    for (int e = 0; e < N; ++e) lanes[lane * N + e] = acc[k][e];
    __syncthreads();
    if (threadIdx.y == 0 && live) {
      for (int ly = 1; ly < int(blockDim.y); ++ly) {
#pragma unroll
        for (int e = 0; e < N; ++e) acc[k][e] += lanes[(ly * blockDim.x + threadIdx.x) * N + e];
      }
#pragma unroll
      for (int e = 0; e < N; ++e) out[k * stride + e] = acc[k][e];
    }
    __syncthreads();
  }
}

// out[k][c] = sum over chunks of partials[chunk][k][c] (partials [chunks,
// K, cols]): a block of 32 columns x kChunkLanes lanes, lane y adding chunks
// y, y + kChunkLanes, ... in order, then lane 0 adding the lanes in order:
// a fixed order (deterministic), with the chunks' loads spread over lanes
// rather than one long dependent walk per column.
constexpr int kChunkLanes = 8;

template <int K>
__global__ void __launch_bounds__(32 * kChunkLanes)
    SumColumnPartials(const float* __restrict__ partials, float* out0, float* out1, int64_t chunks,
                      int64_t cols) {
  __shared__ float part[kChunkLanes][K][32];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float s[K] = {};
  if (c < cols) {
#pragma unroll 4
    for (int64_t i = threadIdx.y; i < chunks; i += kChunkLanes) {
#pragma unroll
      for (int k = 0; k < K; ++k) s[k] += partials[(i * K + k) * cols + c];
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) part[threadIdx.y][k][threadIdx.x] = s[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float t = part[0][k][threadIdx.x];
    for (int y = 1; y < kChunkLanes; ++y) t += part[y][k][threadIdx.x];
    (k == 0 ? out0 : out1)[c] = t;
  }
}

// SumColumnPartials' launch.
template <int K>
inline void LaunchColumnPartials(const float* partials, float* out0, float* out1, int64_t chunks,
                                 int64_t cols, cudaStream_t stream) {
  SumColumnPartials<K>
      <<<unsigned(CeilDiv(cols, 32)), dim3(32, kChunkLanes), 0, stream>>>(partials, out0, out1, chunks, cols);
}

}  // namespace jaxdnn
