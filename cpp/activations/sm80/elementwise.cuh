// The family's memory access: a thread's share of a row is one 16-byte
// vector (kVec) or one element, loaded as raw bits first (several rows in
// flight), then unpacked to float32; and the dtype x activation dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/activation.h"
#include "activations/plan.h"
#include "common/cuda_vec.cuh"
#include "common/ffi_util.h"
#include "common/launch_status.h"

namespace jaxdnn::activations {

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

}  // namespace jaxdnn::activations
