// The additive bias in the sm90 two-kernel backward's extended path
// (kBias): the scores are recomputed with the bias, as the forward added it
// (attention/sm90/forward_bias.cuh), and the dQ kernel stores dS, the
// bias's gradient, for its tile.
//
// Both kernels walk their blocks from the top down, so each consumer warp
// copies the next block's bias slice into a shared-memory stage of its own
// (cp.async) while the current block runs, predicting the block below; a
// miss copies the right block and waits.
//   dQ kernel: rows are queries, as in the forward: FwdBiasStage.
//   dK/dV kernel: rows are keys (S^T): BwdBiasStageT holds the warp's 16 keys
//   for the block's queries in the bias's own layout (a query per 32-byte
//   row) and reads them transposed with ldmatrix.trans.
#pragma once

#include <cstdint>

#include "attention/sm90/forward_bias.cuh"
#include "common/smem_addr.cuh"

namespace jaxdnn::attention::sm90 {

// Where the bias and its gradient are in the kernels' parameters.
// dS goes to target[.., q_len, kv_len] (float32) at b * slice_b + h *
// slice_h: the gradient itself (the bias's own shape, or broadcast over
// batch and/or heads), or a full-size staging area a reduction sums from.
// Broadcast over batch / heads (chain_b / chain_h): the (batch, head) pairs
// that share a slice add into it in turn, in (batch, head) order, block by
// block: a warp waits until its predecessor's same warp has added the same
// block (progress counters), so the sums are deterministic. The first of a
// slice stores, and zero-fills the blocks no band reaches.
struct BwdBiasParams {
  FwdBiasParams bias;
  float* target = nullptr;
  long long slice_b = 0, slice_h = 0;
  int chain_b = 0, chain_h = 0;
  int* progress = nullptr;  // chains: [batch * heads, query tiles, 8 warps], zeroed per launch
};

// The pair a slice's contributions come from before (b, h): -1 for the first.
// It always has the lower linear block index (both grid layouts), so a
// successor spinning on it relies on in-order CTA dispatch for progress, as
// the fused backward's ordered dQ (and FA3's deterministic backward) do.
__device__ __forceinline__ int BwdBiasPredecessor(const BwdBiasParams& bp, int b, int h, int heads) {
  if (bp.chain_h && h > 0) return b * heads + h - 1;
  if (bp.chain_b && b > 0) return (b - 1) * heads + (bp.chain_h ? heads - 1 : h);
  return -1;
}

__device__ __forceinline__ void BwdWaitProgress(const int* flag, int target) {
  int v;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(flag) : "memory");
  } while (v < target);
}

// After a warp's stores of a block: every lane's writes before the count.
__device__ __forceinline__ void BwdPostProgress(int* flag, int value, int lane) {
  __threadfence();
  __syncwarp();
  if (lane == 0) asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
}

// Zeroes keys [c0, c1) of `rows` rows from `row_base` (row stride kv_len).
__device__ __forceinline__ void BwdZeroDs(float* row_base, int kv_len, int rows, int c0, int c1, int lane) {
  c1 = c1 < kv_len ? c1 : kv_len;
  if (c0 >= c1) return;
  const bool vec = (kv_len % 4 == 0) && (c0 % 4 == 0) && (c1 % 4 == 0);
  for (int r = 0; r < rows; ++r) {
    float* row = row_base + static_cast<long long>(r) * kv_len;
    if (vec) {
      for (int c = c0 + 4 * lane; c < c1; c += 128)
        *reinterpret_cast<float4*>(row + c) = make_float4(0, 0, 0, 0);
    } else {
      for (int c = c0 + lane; c < c1; c += 32) row[c] = 0.f;
    }
  }
}

// A warp's staged bias with the block whose copy is in flight (-1: none).
// Stage: FwdBiasStage<kBlockN> (dQ) or BwdBiasStageT<kBlockM> (dK/dV); both
// copy from `base` (the bias at the warp's first row or key), `valid` rows
// or keys of it.
template <typename Stage>
struct BwdBiasWalk {
  uint32_t stage;
  const uint8_t* base;
  int valid;
  int pending = -1;

  // s += bias of block `blk` (of `span` columns); then the copy of block
  // blk - 1 starts.
  template <int N>
  __device__ __forceinline__ void Add(float (&s)[N], const FwdBiasParams& bp, int blk, int span, int limit,
                                      int lane) {
    if (pending != blk) {
      CpAsyncWaitAll();  // a stale copy must not land over the right one
      __syncwarp();
      Stage::Issue(bp, stage, base, valid, limit, blk * span, lane);
    }
    Stage::Add(s, bp, stage, lane);
    pending = blk - 1;
    if (pending >= 0) Stage::Issue(bp, stage, base, valid, limit, pending * span, lane);
  }
};

// One warp's 16 keys of the bias for kBlockM queries: a 32-byte row per
// query, its two 16-byte halves swapped on rows 4-7 of every 8 (so the 8
// rows of an ldmatrix fall on distinct banks).
template <int kBlockM>
struct BwdBiasStageT {
  static constexpr int kBytes = kBlockM * 32;

  static __device__ __forceinline__ uint32_t Offset(int q, int key) {
    return q * 32 + ((((key >> 3) ^ ((q >> 2) & 1))) << 4) + (key & 7) * 2;
  }

  // Starts the copy of queries [q0, q0 + kBlockM) (those below q_len) of the
  // `keys_valid` keys at `keys` (the bias at query 0, the warp's first key);
  // with bp.row_broadcast only queries q0 .. q0 + 7 (every query's row is the
  // same; a query q reads row q % 8, which is past q_len only if q is).
  static __device__ __forceinline__ void Issue(const FwdBiasParams& bp, uint32_t stage, const uint8_t* keys,
                                               int keys_valid, int q_len, int q0, int lane) {
    const long long row_bytes = bp.stride_t * 2;
    const int rows = bp.row_broadcast ? 8 : kBlockM;
    if (bp.copy_bytes == 16) {
#pragma unroll 1
      for (int id = lane; id < 2 * rows; id += 32) {
        const int q = id / 2, key = (id % 2) * 8;
        const int left = q0 + q < q_len ? (keys_valid - key) * 2 : 0;
        const int bytes = left < 0 ? 0 : (left > 16 ? 16 : left);
        const uint8_t* src = bytes > 0 ? keys + (q0 + q) * row_bytes + key * 2 : keys;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(stage + Offset(q, key)),
                     "l"(src), "r"(bytes));
      }
    } else if (bp.copy_bytes == 4) {
#pragma unroll 1
      for (int id = lane; id < 8 * rows; id += 32) {
        const int q = id / 8, key = (id % 8) * 2;
        const int left = q0 + q < q_len ? (keys_valid - key) * 2 : 0;
        const int bytes = left < 0 ? 0 : (left > 4 ? 4 : left);
        const uint8_t* src = bytes > 0 ? keys + (q0 + q) * row_bytes + key * 2 : keys;
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(stage + Offset(q, key)), "l"(src),
                     "r"(bytes));
      }
    } else {
#pragma unroll 1
      for (int id = lane; id < 16 * rows; id += 32) {
        const int q = id / 16, key = id % 16;
        unsigned short v = 0;
        if (q0 + q < q_len && key < keys_valid) {
          v = __ldg(reinterpret_cast<const unsigned short*>(keys + (q0 + q) * row_bytes) + key);
        }
        asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(stage + Offset(q, key)), "h"(v));
      }
    }
    CpAsyncCommit();
  }

  // s^T = s^T * mul + bias (natural units): element s[4 j + 2 r + e] is (key g + 8 r, query
  // 8 j + 2 t + e); ldmatrix.trans of the 8x8 block (queries 8 j.., keys
  // 8 r..) hands thread (g, t) exactly the queries 2 t, 2 t + 1 of key g.
  template <int N>
  static __device__ __forceinline__ void Add(float (&s)[N], const FwdBiasParams& bp, uint32_t stage,
                                             int lane) {
    static_assert(N == kBlockM / 2, "S^T of kBlockM queries");
    CpAsyncWaitAll();
    __syncwarp();
    const int mi = lane / 8;  // the matrix this lane addresses: (j + mi / 2, r = mi % 2)
    const int block_rows = bp.row_broadcast ? 0 : 8;  // row_broadcast: rows 0-7 for every block
#pragma unroll
    for (int j = 0; j < kBlockM / 8; j += 2) {
      uint32_t reg[4];
      const uint32_t addr = stage + Offset(block_rows * (j + mi / 2) + lane % 8, 8 * (mi % 2));
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(reg[0]), "=r"(reg[1]), "=r"(reg[2]), "=r"(reg[3])
                   : "r"(addr));
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int jj = j + m / 2, r = m % 2;
        float2 b;
        if (bp.f16) {
          b = __half22float2(*reinterpret_cast<const __half2*>(&reg[m]));
        } else {
          b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&reg[m]));
        }
        s[4 * jj + 2 * r] = fmaf(s[4 * jj + 2 * r], bp.mul, b.x);
        s[4 * jj + 2 * r + 1] = fmaf(s[4 * jj + 2 * r + 1], bp.mul, b.y);
      }
    }
    __syncwarp();
  }
};

// The dQ kernel's stage in BwdBiasWalk's interface (FwdBiasStage reads by
// the thread's quad coordinates).
template <int kBlockN>
struct BwdBiasStageRows {
  static constexpr int kBytes = FwdBiasStage<kBlockN>::kBytes;
  static __device__ __forceinline__ void Issue(const FwdBiasParams& bp, uint32_t stage, const uint8_t* rows,
                                               int rows_valid, int kv_len, int n0, int lane) {
    FwdBiasStage<kBlockN>::Issue(bp, stage, rows, rows_valid, kv_len, n0, lane);
  }
  template <int N>
  static __device__ __forceinline__ void Add(float (&s)[N], const FwdBiasParams& bp, uint32_t stage,
                                             int lane) {
    FwdBiasStage<kBlockN>::Add(s, bp, stage, lane / 4, lane % 4);
  }
};

// Stores dS (d0, d1) of (row, col), (row, col + 1) into dbias_full
// [.., q_len, kv_len] at `row_base` (the row's start); keys past kv_len and
// rows past q_len are not stored.
// add != 0: adds to what is there (a chain's later contributions) by
// fire-and-forget reductions in L2, so the warp does not stall on a load per
// pair; the chain's order (each contributor starts a block only after its
// predecessor's adds to it completed) keeps the sums deterministic. One
// predicated instruction either way (two code paths spilled registers).
__device__ __forceinline__ void BwdDsOut(float* at, float d, int add) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p red.global.add.f32 [%0], %1;\n"
      " @!p st.global.f32 [%0], %1;\n}\n" ::"l"(at),
      "f"(d), "r"(add)
      : "memory");
}
__device__ __forceinline__ void BwdStoreDsPair(float* row_base, int col, int kv_len, float d0, float d1,
                                               int add) {
  if (col + 1 < kv_len && (kv_len & 1) == 0) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n @p red.global.add.v2.f32 [%0], {%1, %2};\n"
        " @!p st.global.v2.f32 [%0], {%1, %2};\n}\n" ::"l"(row_base + col),
        "f"(d0), "f"(d1), "r"(add)
        : "memory");
  } else {
    if (col < kv_len) BwdDsOut(row_base + col, d0, add);
    if (col + 1 < kv_len) BwdDsOut(row_base + col + 1, d1, add);
  }
}

}  // namespace jaxdnn::attention::sm90
