// 16-byte vector loads/stores of float32, bfloat16 and float16, unpacked to
// float32 registers. Every memory-bound kernel moves rows through these.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace jaxdnn {

template <typename T>
struct Vec16;

template <>
struct Vec16<float> {
  static constexpr int kElems = 4;
  __device__ static void Unpack(const uint4& r, float* f) {
    f[0] = __uint_as_float(r.x);
    f[1] = __uint_as_float(r.y);
    f[2] = __uint_as_float(r.z);
    f[3] = __uint_as_float(r.w);
  }
  __device__ static uint4 Pack(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
  }
  __device__ static float Load1(const float* p) { return *p; }
  __device__ static void Store1(float* p, float v) { *p = v; }
};

template <typename Half, typename Half2, float2 (*ToF2)(Half2), Half2 (*FromF2)(float2), float (*ToF)(Half),
          Half (*FromF)(float)>
struct Vec16Half {
  static constexpr int kElems = 8;
  __device__ static void Unpack(const uint4& r, float* f) {
    const Half2* h = reinterpret_cast<const Half2*>(&r);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 v = ToF2(h[i]);
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  }
  __device__ static uint4 Pack(const float* f) {
    uint4 r;
    Half2* h = reinterpret_cast<Half2*>(&r);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = FromF2(make_float2(f[2 * i], f[2 * i + 1]));
    return r;
  }
  __device__ static float Load1(const Half* p) { return ToF(*p); }
  __device__ static void Store1(Half* p, float v) { *p = FromF(v); }
};

__device__ inline float2 Bf2ToF2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ inline __nv_bfloat162 F2ToBf2(float2 v) { return __float22bfloat162_rn(v); }
__device__ inline float BfToF(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline __nv_bfloat16 FToBf(float v) { return __float2bfloat16_rn(v); }
__device__ inline float2 H2ToF2(__half2 v) { return __half22float2(v); }
__device__ inline __half2 F2ToH2(float2 v) { return __float22half2_rn(v); }
__device__ inline float HToF(__half v) { return __half2float(v); }
__device__ inline __half FToH(float v) { return __float2half_rn(v); }

template <>
struct Vec16<__nv_bfloat16> : Vec16Half<__nv_bfloat16, __nv_bfloat162, Bf2ToF2, F2ToBf2, BfToF, FToBf> {};
template <>
struct Vec16<__half> : Vec16Half<__half, __half2, H2ToF2, F2ToH2, HToF, FToH> {};

// Streaming accesses: rows are touched once, so keep them from evicting the
// parameters that every row re-reads.
__device__ inline uint4 LoadStream(const void* p) { return __ldcs(reinterpret_cast<const uint4*>(p)); }
__device__ inline void StoreStream(void* p, const uint4& v) { __stcs(reinterpret_cast<uint4*>(p), v); }
// Row accesses with the hint chosen per launch: evict-first where the rows are
// touched once in a problem larger than L2, plain where the problem fits in
// L2 and the next kernel (or call) may find it there.
__device__ inline uint4 LoadRow(const void* p, bool stream) {
  return stream ? __ldcs(reinterpret_cast<const uint4*>(p)) : __ldg(reinterpret_cast<const uint4*>(p));
}
__device__ inline void StoreRow(void* p, const uint4& v, bool stream) {
  if (stream) {
    __stcs(reinterpret_cast<uint4*>(p), v);
  } else {
    *reinterpret_cast<uint4*>(p) = v;
  }
}
__device__ inline float4 LoadParam(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
// A parameter read that asks L1 to keep the line over streamed data (every
// row of a norm re-reads the same scale and bias).
__device__ inline float4 LoadParamKeep(const float* p) {
  float4 v;
  asm volatile("ld.global.nc.L1::evict_last.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}

__device__ inline float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline float2 WarpSum2(float2 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
  }
  return v;
}

__device__ inline float4 WarpSum4(float4 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
    v.z += __shfl_xor_sync(0xffffffffu, v.z, o);
    v.w += __shfl_xor_sync(0xffffffffu, v.w, o);
  }
  return v;
}

// Sums the pair `v` over the blockDim.x threads that share threadIdx.y (one
// row), in a fixed order, so the result is deterministic, with ONE barrier
// round. Every thread of the block must call it. `scratch` holds
// blockDim.y * 64 floats and is read by every thread after the barrier, so a
// kernel may write it again only after another barrier: one that reduces
// once needs nothing more; one that reduces row after row alternates two
// buffers (a buffer is rewritten two calls later, after the next call's
// barrier, which every thread reaches only once it has read this one).
__device__ inline float2 RowSum2OneBarrier(float2 v, float* scratch) {
  v = WarpSum2(v);
  const int warps = blockDim.x >> 5;
  if (warps == 1) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* s = scratch + threadIdx.y * 64;
  if (lane == 0) {
    s[warp] = v.x;
    s[32 + warp] = v.y;
  }
  __syncthreads();
  return WarpSum2(lane < warps ? make_float2(s[lane], s[32 + lane]) : make_float2(0.0f, 0.0f));
}

// The same for one value; `scratch` holds blockDim.y * 32 floats.
__device__ inline float RowSumOneBarrier(float v, float* scratch) {
  v = WarpSum(v);
  const int warps = blockDim.x >> 5;
  if (warps == 1) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* s = scratch + threadIdx.y * 32;
  if (lane == 0) s[warp] = v;
  __syncthreads();
  return WarpSum(lane < warps ? s[lane] : 0.0f);
}

// RowSumOneBarrier followed by the barrier that frees `scratch` for the
// caller's next call.
__device__ inline float RowSum(float v, float* scratch) {
  const float t = RowSumOneBarrier(v, scratch);
  if ((blockDim.x >> 5) > 1) __syncthreads();
  return t;
}

// Mean and M2 of a row in ONE pass over its registers, about a shift K (any
// value of the row's scale; the forward takes the mean of its first vector): the
// sums of d = x - K and d^2 give mean = K + S / n and M2 = Q - S^2 / n. With
// K inside the row's range, |mean - K| is of the order of its spread, so the
// subtraction loses no more than a few float32 ulps of M2 (the shifted-data
// algorithm). Fewer instructions than RowMeanM2's two passes and merge.
// One barrier: the block must not write `scratch` again afterwards.
// This thread's shifted sums (sum of d, sum of d^2, d = x - shift) over its
// vectors of a row (thread t holds vectors t, t + blockDim.x, ...).
template <typename T, int kVpt>
__device__ inline float2 ShiftedSums(const uint4 (&raw)[kVpt], int64_t nvec, float shift) {
  using V = Vec16<T>;
  float sum = 0.0f, sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    if (threadIdx.x + int64_t(k) * blockDim.x < nvec) {
      float v[V::kElems];
      V::Unpack(raw[k], v);
#pragma unroll
      for (int e = 0; e < V::kElems; ++e) {
        const float d = v[e] - shift;
        sum += d;
        sq = fmaf(d, d, sq);
      }
    }
  }
  return make_float2(sum, sq);
}

template <typename T, int kVpt>
__device__ inline float2 RowMeanM2Shifted(const uint4 (&raw)[kVpt], int64_t nvec, float shift, float inv_dim,
                                          float* scratch) {
  // The forward reduces once per block: one barrier.
  const float2 t = RowSum2OneBarrier(ShiftedSums<T, kVpt>(raw, nvec, shift), scratch);
  const float mean_d = t.x * inv_dim;
  return make_float2(shift + mean_d, fmaxf(t.y - t.x * mean_d, 0.0f));
}

// Mean and centred sum of squares (M2) of a row held as packed 16-byte
// vectors: thread t has vectors t, t + blockDim.x, ... (the first `nvec`
// of the row are real). Each warp takes its own exact two-pass mean and M2
// with shuffles, then one barrier round merges the warps (Chan et al.'s
// pairwise formula, evaluated in warp order by every thread, so all agree
// bit for bit). `scratch` holds blockDim.y * 96 floats.
template <typename T, int kVpt>
__device__ inline float2 RowMeanM2(const uint4 (&raw)[kVpt], int64_t nvec, float* scratch) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  float sum = 0.0f, cnt = 0.0f;
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    if (threadIdx.x + int64_t(k) * blockDim.x < nvec) {
      float v[N];
      V::Unpack(raw[k], v);
#pragma unroll
      for (int e = 0; e < N; ++e) sum += v[e];
      cnt += float(N);
    }
  }
  const float2 sc = WarpSum2(make_float2(sum, cnt));
  const float warp_mean = sc.y > 0.0f ? sc.x / sc.y : 0.0f;
  float q = 0.0f;
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    if (threadIdx.x + int64_t(k) * blockDim.x < nvec) {
      float v[N];
      V::Unpack(raw[k], v);
#pragma unroll
      for (int e = 0; e < N; ++e) q += (v[e] - warp_mean) * (v[e] - warp_mean);
    }
  }
  q = WarpSum(q);
  const int warps = blockDim.x >> 5;
  if (warps == 1) return make_float2(warp_mean, q);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* s = scratch + threadIdx.y * 96;
  if (lane == 0) {
    s[warp] = sc.y;
    s[32 + warp] = warp_mean;
    s[64 + warp] = q;
  }
  __syncthreads();
  float n = 0.0f, weighted = 0.0f;
  for (int w = 0; w < warps; ++w) {
    n += s[w];
    weighted += s[w] * s[32 + w];
  }
  const float mean = n > 0.0f ? weighted / n : 0.0f;
  float m2 = 0.0f;
  for (int w = 0; w < warps; ++w) {
    const float d = s[32 + w] - mean;
    m2 += s[64 + w] + s[w] * d * d;
  }
  return make_float2(mean, m2);
}

}  // namespace jaxdnn
