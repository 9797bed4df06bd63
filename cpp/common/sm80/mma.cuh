// Warp-level tensor-core building blocks (sm_80+ PTX, also run on Hopper):
// ldmatrix, mma.sync m16n8k16 with float accumulators,
// and the XOR swizzle that keeps ldmatrix free of shared-memory bank conflicts.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/sm80/cp_async.cuh"

namespace jaxdnn::sm80 {

using jaxdnn::CpAsync16;
using jaxdnn::CpAsyncCommit;
using jaxdnn::CpAsyncWait;
using jaxdnn::SmemAddr;

// Four 8x8 16-bit matrices from shared memory (lanes 8i..8i+7 address matrix
// i's rows): with rows 0-7 / 8-15 and columns 0-7 / 8-15 as matrices 0-3 in
// the order (r0, c0), (r8, c0), (r0, c8), (r8, c8), one warp's 16 x 16 A
// fragment of an m16n8k16 mma (and of an m64nNk16 wgmma).
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem) {
  LdMatrixX4(r, SmemAddr(smem));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}
// Two 8x8 matrices, transposed (lanes 0-15 give the row addresses).
__device__ __forceinline__ void LdMatrixX2Trans(uint32_t (&r)[2], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(SmemAddr(smem)));
}

template <typename T>
struct MmaOp;
template <>
struct MmaOp<__nv_bfloat16> {
  __device__ __forceinline__ static void Run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct MmaOp<__half> {
  __device__ __forceinline__ static void Run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// Two floats -> one register of two 16-bit values (low half = first).
template <typename T>
__device__ __forceinline__ uint32_t Pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t Pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t Pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// A tile of rows x kCols 16-bit elements in shared memory, 16-byte chunks
// XOR-swizzled by row (chunk c of row r lives at c ^ (r % 8)) so that the
// eight rows one ldmatrix reads hit eight different bank groups.
// kCols must be a multiple of 64 (eight chunks).
template <int kCols>
struct SwizzledTile {
  static_assert(kCols % 64 == 0, "swizzled rows need a multiple of 64 columns");
  __device__ __forceinline__ static int Offset(int row, int chunk) {
    return row * kCols + ((chunk ^ (row & 7)) << 3);
  }
};

}  // namespace jaxdnn::sm80
