// CUDA attention forward: one block of 4 warps computes 64 query rows of one
// head (16 rows per warp) against the key/value tiles its rows can see.
//
//   mainloop:  K/V tiles double-buffered through cp.async into swizzled shared
//              memory; S = Q K^T and O += P V on mma.sync m16n8k16 tensor cores.
//   softmax:   online, in registers, float32; masks from attention/mask.h.
//   skipping:  tiles outside the block's causal/window/padding band are never
//              loaded; with segment ids, a tile none of whose keys can share a
//              segment with the block's queries is skipped after one vote.
//   epilogue:  O / rowsum written in the input dtype; log-sum-exp in float32.
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <climits>

#include "attention/mask.h"
#include "attention/sm80/mma_tiles.cuh"
#include "common/sm80/mma.cuh"

namespace jaxdnn::attention {

constexpr int kFwdBlockM = 64;
constexpr int kFwdThreads = 128;

// Keys per tile. 48 at head dim 128 keeps a block under 75 KB of shared
// memory (and 170 registers), so three blocks (12 warps) fit on an SM.
template <int kD>
constexpr int FwdBlockN() {
  return kD <= 64 ? 64 : (kD <= 128 ? 48 : 32);
}

template <int kD>
constexpr int FwdMinBlocks() {
  return kD <= 128 ? 3 : 2;
}

template <int kD>
constexpr int FwdSmemBytes() {
  return (kFwdBlockM * kD + 4 * FwdBlockN<kD>() * kD) * 2;
}

// Copies `kRows` rows of a [*, heads, kD] strided tensor into a swizzled tile,
// zero-filling rows at or past `valid`. Each thread always copies the same
// chunk column, so its offsets advance by a constant per pass.
template <typename T, int kD, int kRows>
__device__ __forceinline__ void LoadTile(T* tile, const T* src, int64_t row_stride, int valid) {
  constexpr int kChunks = kD / 8;
  constexpr int kRowsPerPass = kFwdThreads / kChunks;
  const int ch = threadIdx.x % kChunks;
  int r = threadIdx.x / kChunks;
  const T* from = src + r * row_stride + ch * 8;
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass, r += kRowsPerPass) {
    const bool ok = r < valid;
    sm80::CpAsync16(tile + sm80::SwizzledTile<kD>::Offset(r, ch), ok ? from : src, ok ? 16 : 0);
    from += kRowsPerPass * row_stride;
  }
}

// Rows [row0, row0 + kRows) of two operands with the same layout (K and V,
// or Q and dO) into their tiles; rows at or past `len` are zero-filled.
template <typename T, int kD, int kRows>
__device__ __forceinline__ void LoadTilePair(T* tile_a, T* tile_b, const T* src_a, const T* src_b,
                                             int64_t row_stride, int row0, int len) {
  LoadTile<T, kD, kRows>(tile_a, src_a + int64_t(row0) * row_stride, row_stride, len - row0);
  LoadTile<T, kD, kRows>(tile_b, src_b + int64_t(row0) * row_stride, row_stride, len - row0);
}

// One bias element as float32, whatever the bias dtype.
template <typename Args>
__device__ __forceinline__ float LoadBias(const Args& p, int b, int h, int i, int j) {
  const int64_t off = p.bias.Offset(b, h, i, j);
  switch (p.bias_dtype) {
    case ffi::DataType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias.data)[off]);
    case ffi::DataType::F16: return __half2float(static_cast<const __half*>(p.bias.data)[off]);
    default: return static_cast<const float*>(p.bias.data)[off];
  }
}

// Packed documents: how a tile of keys [n0, n0 + kKeys) relates to a block
// whose query segment ids span [seg_min, seg_max] (one block-wide vote each).
enum class SegmentVote { kSkip, kUniform, kMixed };

template <int kKeys>
__device__ __forceinline__ SegmentVote VoteSegments(const int32_t* ids, int n0, int len, int seg_min,
                                                    int seg_max) {
  const int j = n0 + int(threadIdx.x);
  bool may_match = false, same = true;
  if (threadIdx.x < kKeys && j < len) {
    const int id = ids[j];
    may_match = id >= seg_min && id <= seg_max;
    same = id == seg_min;
  }
  if (!__syncthreads_or(may_match)) return SegmentVote::kSkip;  // no pair can match
  // One segment on both sides: every pair matches, no per-element test needed.
  if (seg_min == seg_max && __syncthreads_and(same)) return SegmentVote::kUniform;
  return SegmentVote::kMixed;
}

// Applies the segment vote of the tile of rows [r0, r0 + kRows) (block-wide):
// false when the tile can be skipped; otherwise `elementwise` drops to false
// when one segment spans both sides and no mask or bias needs the per-element
// path.
template <int kRows, typename Args>
__device__ __forceinline__ bool ApplySegmentVote(const Args& p, const int32_t* ids, int r0, int len,
                                                 int seg_min, int seg_max, bool& elementwise) {
  const SegmentVote vote = VoteSegments<kRows>(ids, r0, len, seg_min, seg_max);
  if (vote == SegmentVote::kSkip) return false;
  if (vote == SegmentVote::kUniform && p.mask.data == nullptr && p.bias.data == nullptr) {
    elementwise = false;
  }
  return true;
}

// The segment-id range [min, max] of rows [first, last] (block-wide; needs 4 ints of smem).
__device__ __forceinline__ void SegmentRange(const int32_t* ids, int first, int last, int* smem4, int& lo,
                                             int& hi) {
  if (threadIdx.x < 2) smem4[threadIdx.x] = threadIdx.x ? INT_MIN : INT_MAX;
  __syncthreads();
  for (int r = first + int(threadIdx.x); r <= last; r += int(blockDim.x)) {
    atomicMin(&smem4[0], ids[r]);
    atomicMax(&smem4[1], ids[r]);
  }
  __syncthreads();
  lo = smem4[0];
  hi = smem4[1];
}

template <typename T, int kD>
__global__ void __launch_bounds__(kFwdThreads, FwdMinBlocks<kD>()) AttentionFwdKernel(const AttnFwdArgs p) {
  constexpr int kBlockN = FwdBlockN<kD>();
  constexpr int kNTiles = kBlockN / 8;  // n8 blocks of S per warp
  constexpr int kDTiles = kD / 8;       // n8 blocks of O per warp
  using Swz = sm80::SwizzledTile<kD>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + kFwdBlockM * kD;   // [2][kBlockN][kD]
  T* sV = sK + 2 * kBlockN * kD;  // [2][kBlockN][kD]

  const AttnShape& s = p.shape;
  const AttnMaskParams& m = p.mask_params;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kFwdBlockM;
  const int kvh = h / int(s.group());
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t q_stride = s.heads * kD, kv_stride = s.kv_heads * kD;

  // The key band of this block: lo of its first row, hi of its last valid row
  // (both are non-decreasing in the row).
  const int q_valid = int(ClampLength(m.q_lengths, b, s.q_len));
  const int last_row = min(q0 + kFwdBlockM, q_valid) - 1;
  int band_lo = 0, band_hi = 0;
  if (last_row >= q0) {
    band_lo = int(AllowedKeys(m, s, b, q0).lo);
    band_hi = int(AllowedKeys(m, s, b, last_row).hi);
  }
  // Tiles every row of the block sees whole need no per-element masking
  // (unless segments, a mask or a bias make every element differ).
  int full_lo = INT_MAX, full_hi = INT_MIN;
  if (last_row == q0 + kFwdBlockM - 1) {
    full_lo = int(AllowedKeys(m, s, b, last_row).lo);
    full_hi = int(AllowedKeys(m, s, b, q0).hi);
  }
  const bool elementwise = m.q_segments != nullptr || p.mask.data != nullptr || p.bias.data != nullptr;
  const int tile_lo = band_lo / kBlockN;
  const int tile_hi = band_hi > band_lo ? (band_hi + kBlockN - 1) / kBlockN : tile_lo;

  // This thread's two rows (g and g + 8 of the warp's 16) and their key ranges.
  const int g = lane / 4, quad = lane % 4;
  int row[2], lo[2], hi[2];
  uint32_t drop_state[2] = {0, 0};
  const bool dropout = m.seeds != nullptr && m.dropout_rate > 0.f;
  for (int r = 0; r < 2; ++r) {
    row[r] = q0 + warp * 16 + g + 8 * r;
    const KeyRange kr = AllowedKeys(m, s, b, row[r]);
    lo[r] = int(kr.lo);
    hi[r] = int(kr.hi);
    if (dropout) drop_state[r] = DropoutRowState(m.seeds + 2 * b, uint32_t(h), uint32_t(row[r]));
  }
  const uint32_t drop_threshold = dropout ? DropoutThreshold(m.dropout_rate) : 0u;
  const float keep_scale = dropout ? 1.f / (1.f - m.dropout_rate) : 1.f;

  // Segment ids: the block's query segment range, for the per-tile vote.
  __shared__ int seg_range[4];
  int seg_min = 0, seg_max = 0;
  if (m.q_segments != nullptr && last_row >= q0) {
    SegmentRange(m.q_segments + int64_t(b) * s.q_len, q0, last_row, seg_range, seg_min, seg_max);
  }

  const T* q_src = static_cast<const T*>(p.q) + (int64_t(b) * s.q_len + q0) * q_stride + int64_t(h) * kD;
  const T* k_src = static_cast<const T*>(p.k) + int64_t(b) * s.kv_len * kv_stride + int64_t(kvh) * kD;
  const T* v_src = static_cast<const T*>(p.v) + int64_t(b) * s.kv_len * kv_stride + int64_t(kvh) * kD;

  float o[kDTiles][4];
  for (int i = 0; i < kDTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

  if (tile_hi > tile_lo) {
    LoadTile<T, kD, kFwdBlockM>(sQ, q_src, q_stride, int(s.q_len) - q0);
    LoadTilePair<T, kD, kBlockN>(sK, sV, k_src, v_src, kv_stride, tile_lo * kBlockN, int(s.kv_len));
    sm80::CpAsyncCommit();
  }

  for (int t = tile_lo; t < tile_hi; ++t) {
    const int buf = (t - tile_lo) & 1;
    const int n0 = t * kBlockN;
    if (t + 1 < tile_hi) {
      LoadTilePair<T, kD, kBlockN>(sK + (buf ^ 1) * kBlockN * kD, sV + (buf ^ 1) * kBlockN * kD, k_src, v_src,
                                   kv_stride, n0 + kBlockN, int(s.kv_len));
    }
    sm80::CpAsyncCommit();
    sm80::CpAsyncWait<1>();
    __syncthreads();

    bool tile_elementwise = elementwise;
    if (m.q_segments != nullptr &&
        !ApplySegmentVote<kBlockN>(p, m.kv_segments + int64_t(b) * s.kv_len, n0, int(s.kv_len), seg_min,
                                   seg_max, tile_elementwise)) {
      __syncthreads();
      continue;
    }

    const T* tK = sK + buf * kBlockN * kD;
    const T* tV = sV + buf * kBlockN * kD;

    // S = Q K^T for this warp's 16 rows.
    float sc[kNTiles][4];
    WarpScores<T, kD, kBlockN>(sc, sQ, warp * 16, tK, lane);

    // Logits and masks, then the online softmax update of both rows.
    float tile_max[2] = {-INFINITY, -INFINITY};
    if (!tile_elementwise && n0 >= full_lo && n0 + kBlockN <= full_hi) {
#pragma unroll
      for (int nb = 0; nb < kNTiles; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          sc[nb][e] = Logit(m, sc[nb][e]);
          tile_max[e / 2] = fmaxf(tile_max[e / 2], sc[nb][e]);
        }
      }
    } else {
#pragma unroll
      for (int nb = 0; nb < kNTiles; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e / 2;
          const int j = n0 + nb * 8 + 2 * quad + (e & 1);
          bool keep = (j >= lo[r]) & (j < hi[r]);
          if (tile_elementwise && keep) {
            keep = SameSegment(m, s, b, row[r], j) &&
                   (p.mask.data == nullptr ||
                    static_cast<const uint8_t*>(p.mask.data)[p.mask.Offset(b, h, row[r], j)]);
          }
          float x = Logit(m, sc[nb][e]);
          if (tile_elementwise && keep && p.bias.data != nullptr) x += LoadBias(p, b, h, row[r], j);
          x = keep ? x : -INFINITY;
          sc[nb][e] = x;
          tile_max[r] = fmaxf(tile_max[r], x);
        }
      }
    }
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = fmaxf(row_max[r], tile_max[r]);
      const float base = new_max == -INFINITY ? 0.f : new_max;
      correction[r] = __expf(row_max[r] - base);
      row_max[r] = new_max;
      tile_max[r] = base;  // reused below as the exponent base
      row_sum[r] *= correction[r];
    }
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
      o[i][0] *= correction[0];
      o[i][1] *= correction[0];
      o[i][2] *= correction[1];
      o[i][3] *= correction[1];
    }
#pragma unroll
    for (int nb = 0; nb < kNTiles; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const float pr = __expf(sc[nb][e] - tile_max[r]);
        row_sum[r] += pr;
        float pd = pr;
        if (dropout) {
          const int j = n0 + nb * 8 + 2 * quad + (e & 1);
          pd = DropoutKeep(drop_state[r], uint32_t(j), drop_threshold) ? pr * keep_scale : 0.f;
        }
        sc[nb][e] = pd;
      }
    }

    // O += P V.
    WarpAccumulatePV<T, kD, kBlockN>(o, sc, tV, lane);
    __syncthreads();  // the next iteration's loads overwrite this buffer
  }
  sm80::CpAsyncWait<0>();

  // Epilogue: each row's sum is spread over its quad.
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    if (row[r] >= s.q_len) continue;
    const bool empty = row_sum[r] == 0.f;  // a NaN sum gives NaN, as the reference
    const float inv = empty ? 0.f : 1.f / row_sum[r];
    T* dst = out + (int64_t(b) * s.q_len + row[r]) * q_stride + int64_t(h) * kD;
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
      *reinterpret_cast<uint32_t*>(dst + i * 8 + 2 * quad) =
          sm80::Pack2<T>(o[i][2 * r] * inv, o[i][2 * r + 1] * inv);
    }
    if (quad == 0) {
      p.lse[(int64_t(b) * s.heads + h) * s.q_len + row[r]] =
          empty ? -INFINITY : (row_max[r] == INFINITY ? INFINITY : row_max[r] + __logf(row_sum[r]));
    }
  }
}

}  // namespace jaxdnn::attention
