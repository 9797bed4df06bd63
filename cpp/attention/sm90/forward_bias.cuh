// The additive bias of the Hopper attention forward's extended path
// (AttnFwdSm90Kernel<..., kExt = true, ..., kBias = true>): a 16-bit bias
// broadcast over any of [batch, heads, q_len] (keys contiguous), added to the
// raw scores before the mask.
//
// Each consumer warp owns the bias of its own 16 query rows: it copies the
// [16, kBlockN] slice of the next kv block into a shared-memory stage of its
// own with cp.async while the current block's softmax and gemms run, then
// reads it back in the wgmma accumulator layout (see forward_mask.cuh). No
// other warp touches the stage, so a __syncwarp orders the copy and the reads.
// The stage's 16-byte chunks are XOR-swizzled by row, so the 8 rows a warp
// reads at once fall on distinct banks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/sm80/cp_async.cuh"
#include "common/smem_addr.cuh"

namespace jaxdnn::attention::sm90 {

struct FwdBiasParams {
  const void* data = nullptr;  // null: no bias
  // Element strides of batch, query head and query row (0 where broadcast);
  // keys are contiguous.
  long long stride_b = 0, stride_h = 0, stride_t = 0;
  // The bias kernels work in natural units: the raw q.k times mul (the
  // softmax scale; 1 with softcap, applied before the bias) plus the bias.
  float mul = 1.f;
  // How a warp copies its slice: 16 or 4 (cp.async chunks: every row start
  // aligned to that many bytes), or 2 (plain element loads).
  int copy_bytes = 16;
  int f16 = 0;  // 1: float16, 0: bfloat16
  // 1: the bias broadcasts over query rows (stride_t 0, a key-padding mask's
  // shape) and the backward's transposed stage (BwdBiasStageT) copies 8
  // query rows once and reads them for every query block, instead of the
  // same row for each of its queries.
  int row_broadcast = 0;
};

template <int kBlockN>
struct FwdBiasStage {
  static constexpr int kRows = 16;  // a warp's query rows
  static constexpr int kRowBytes = kBlockN * 2;
  static constexpr int kBytes = kRows * kRowBytes;
  // (kBlockN % 64 == 0: whole 8-chunk swizzle rows; the kernel asserts it.)

  // Byte offset of (row, key) in the stage.
  static __device__ __forceinline__ uint32_t Offset(int row, int key) {
    return row * kRowBytes + ((((key >> 3) ^ (row & 7))) << 4) + (key & 7) * 2;
  }

  // Starts the copy of keys [n0, n0 + kBlockN) of rows [0, rows_valid) from
  // `rows` (the bias at the warp's first row, key 0). Keys at or past kv_len
  // and rows past rows_valid read as zeros (they are masked anyway).
  static __device__ __forceinline__ void Issue(const FwdBiasParams& bp, uint32_t stage, const uint8_t* rows,
                                               int rows_valid, int kv_len, int n0, int lane) {
    const long long row_bytes = bp.stride_t * 2;
    if (bp.copy_bytes == 16) {
      constexpr int kChunks = kRows * kBlockN / 8;
#pragma unroll 1
      for (int i = 0; i < kChunks / 32; ++i) {
        const int id = i * 32 + lane;
        const int r = id / (kBlockN / 8), key = (id % (kBlockN / 8)) * 8;
        const int left = r < rows_valid ? (kv_len - n0 - key) * 2 : 0;
        const int bytes = left < 0 ? 0 : (left > 16 ? 16 : left);
        const uint8_t* src = bytes > 0 ? rows + r * row_bytes + (n0 + key) * 2 : rows;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(stage + Offset(r, key)),
                     "l"(src), "r"(bytes));
      }
    } else if (bp.copy_bytes == 4) {
      constexpr int kPairs = kRows * kBlockN / 2;
#pragma unroll 1
      for (int i = 0; i < kPairs / 32; ++i) {
        const int id = i * 32 + lane;
        const int r = id / (kBlockN / 2), key = (id % (kBlockN / 2)) * 2;
        const int left = r < rows_valid ? (kv_len - n0 - key) * 2 : 0;
        const int bytes = left < 0 ? 0 : (left > 4 ? 4 : left);
        const uint8_t* src = bytes > 0 ? rows + r * row_bytes + (n0 + key) * 2 : rows;
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(stage + Offset(r, key)), "l"(src),
                     "r"(bytes));
      }
    } else {
      // Odd strides: element by element through registers.
#pragma unroll 1
      for (int i = 0; i < kRows * kBlockN / 32; ++i) {
        const int id = i * 32 + lane;
        const int r = id / kBlockN, key = id % kBlockN;
        unsigned short v = 0;
        if (r < rows_valid && n0 + key < kv_len) {
          v = __ldg(reinterpret_cast<const unsigned short*>(rows + r * row_bytes) + n0 + key);
        }
        asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(stage + Offset(r, key)), "h"(v));
      }
    }
    CpAsyncCommit();
  }

  // s = s * mul + bias (natural units) over this thread's accumulator elements (rows g and g + 8
  // of the warp, keys 8 j + 2 t + e), once the copy landed.
  template <int N>
  static __device__ __forceinline__ void Add(float (&s)[N], const FwdBiasParams& bp, uint32_t stage, int g,
                                             int t) {
    CpAsyncWaitAll();
    __syncwarp();
#pragma unroll
    for (int j = 0; j < N / 4; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        uint32_t raw;
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(raw) : "r"(stage + Offset(g + 8 * r, 8 * j + 2 * t)));
        float2 b;
        if (bp.f16) {
          b = __half22float2(*reinterpret_cast<const __half2*>(&raw));
        } else {
          b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw));
        }
        s[4 * j + 2 * r] = fmaf(s[4 * j + 2 * r], bp.mul, b.x);
        s[4 * j + 2 * r + 1] = fmaf(s[4 * j + 2 * r + 1], bp.mul, b.y);
      }
    }
    __syncwarp();  // every lane has read the stage before it is refilled
  }
};

}  // namespace jaxdnn::attention::sm90
