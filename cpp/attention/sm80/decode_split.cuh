// Split-KV decode forward, phase 1: one CTA per (split, kv head x row group,
// batch) streams its chunk of K/V once through cp.async double buffers and
// computes, for every (query position, query head) row of the group, the
// unnormalized softmax partial over its keys on mma.sync m16n8k16 tensor cores
// (the fragment layout of attention/sm80/forward.cuh). Each warp owns 16 rows
// and one key group (a slice of each key block); it writes (o, max, sum) for
// its rows to its own workspace slot: phase 2 (attention/sm80/decode_combine.cuh)
// merges the slots in a fixed order.
#pragma once

#include <cuda_runtime.h>

#include "attention/mask.h"
#include "attention/sm80/mma_tiles.cuh"
#include "attention/sm80/decode_split_plan.h"
#include "common/sm80/mma.cuh"

namespace jaxdnn::attention {

constexpr int kDecodeThreads = 32 * kDecodeWarps;
constexpr float kDecodeLog2e = 1.4426950408889634f;

// Keys of one block each warp of a key group covers: 64 per CTA block, but
// at most 32 per warp from head dim 128 up (64 spilled 24 bytes at d128, the
// O accumulators alone take 128 registers at d256).
template <int kD, int kKeyGroups>
constexpr int DecodeWarpKeys() {
  return (64 / kKeyGroups) < (kD >= 128 ? 32 : 64) ? 64 / kKeyGroups : (kD >= 128 ? 32 : 64);
}
template <int kD, int kKeyGroups>
constexpr int DecodeBlockKeys() {
  return DecodeWarpKeys<kD, kKeyGroups>() * kKeyGroups;
}

// Block-table entries of a paged pool a CTA stages once, up front: a lookup
// per key row from global memory stalled every block's loads on the table
// read (0.81-0.88x the contiguous decode). A key range needing more entries
// (block sizes under 16 with long chunks) reads the table in place.
constexpr int kDecodeTableStage = 1024;

// Q + 2x(K, V), then (paged launches only, so the contiguous decode keeps
// its occupancy) the staged table entries.
template <int kD, int kRowTiles>
constexpr int DecodeSmemBytes(bool paged) {
  constexpr int kKeyGroups = kDecodeWarps / kRowTiles;
  return (16 * kRowTiles * kD + 4 * DecodeBlockKeys<kD, kKeyGroups>() * kD) * 2 +
         (paged ? kDecodeTableStage * 4 : 0);
}

// Where a CTA's paged key rows are: the staged entries (s_tbl non-null,
// entry 0 the table's entry `first`) or, without them, KvRow (the table
// itself, or a contiguous array).
struct DecodePagedRows {
  PagedKv pg;  // a copy (the address of a kernel parameter would put the parameters in local memory)
  const int32_t* s_tbl = nullptr;
  uint32_t first = 0;
  // The staged entry of table block `blk`, clamped into the pool (the
  // entries are copied raw, so that the copy runs under the lengths' read).
  __device__ __forceinline__ int32_t Entry(uint32_t blk) const {
    const int32_t e = s_tbl[blk - first];
    return e < 0 ? 0 : (e >= pg.num_blocks ? int32_t(pg.num_blocks - 1) : e);
  }
};

struct DecodeSplitParams {
  AttnFwdArgs args;
  int64_t rows;  // q_len * group
  int64_t row_groups;
  int64_t chunk;      // keys per split
  int64_t slots;      // splits * key groups
  float* partial_o;   // [batch * heads * q_len, slots, head_dim]
  float* partial_ml;  // [batch * heads * q_len, slots, 2]: max (log2 units), sum
};

// kBlockN keys from `key0` of K and V (rows at or past `limit` zero-filled).
// k_src/v_src point at this CTA's kv head of row 0 of k/v seen as [rows,
// kv_heads, head_dim]; KvRow finds batch row b's key (contiguous or paged).
// A thread's rows are kRowsPerPass apart, so with staged table entries its
// pool rows follow from one division and a step per pass (a division per row
// ahead of each copy sits on the load's issue path of a lone CTA).
template <typename T, int kD, int kBlockN>
__device__ __forceinline__ void DecodeLoadKv(T* sk, T* sv, const T* k_src, const T* v_src, int64_t stride,
                                             int64_t key0, int64_t limit, const DecodePagedRows& rows,
                                             int64_t b, int64_t kv_len) {
  constexpr int kChunks = kD / 8;
  constexpr int kRowsPerPass = kDecodeThreads / kChunks;
  constexpr int kPasses = kBlockN / kRowsPerPass;
  static_assert(kBlockN % kRowsPerPass == 0, "a block must be whole passes");
  const int ch = threadIdx.x % kChunks, r0 = threadIdx.x / kChunks;
  const bool staged = rows.s_tbl != nullptr;
  const uint32_t bs = uint32_t(rows.pg.block_size), k0 = uint32_t(key0 + r0);
  uint32_t blk = staged ? k0 / bs : 0, in_blk = staged ? k0 - blk * bs : 0;
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int r = r0 + i * kRowsPerPass;
    const bool ok = key0 + r < limit;
    // (rows past `limit` may lie past the staged entries: not read)
    const int64_t row =
        !ok ? 0 : (staged ? int64_t(rows.Entry(blk)) * bs + in_blk : KvRow(rows.pg, b, key0 + r, kv_len));
    const int64_t off = row * stride + ch * 8;
    const int at = sm80::SwizzledTile<kD>::Offset(r, ch);
    sm80::CpAsync16(sk + at, k_src + off, ok ? 16 : 0);
    sm80::CpAsync16(sv + at, v_src + off, ok ? 16 : 0);
    in_blk += kRowsPerPass;
    while (in_blk >= bs && staged) {  // once per pass at block sizes >= kRowsPerPass
      in_blk -= bs;
      ++blk;
    }
  }
}

// Resident CTAs asked of ptxas: 3 at head dim 128 keeps its 2- and 4-tile
// builds at 168 registers (3 CTAs an SM, as the occupancy query expects);
// left free, ptxas capped head dim 64's 4-tile build at 128 and spilled.
template <int kD>
constexpr int DecodeMinCtas() {
  return kD == 128 ? 3 : 1;
}

template <typename T, int kD, int kRowTiles>
__global__ void __launch_bounds__(kDecodeThreads, DecodeMinCtas<kD>())
    DecodeSplitPartialKernel(const DecodeSplitParams dp) {
  constexpr int kKeyGroups = kDecodeWarps / kRowTiles;
  constexpr int kWarpKeys = DecodeWarpKeys<kD, kKeyGroups>();
  constexpr int kBlockN = DecodeBlockKeys<kD, kKeyGroups>();
  constexpr int kRows = 16 * kRowTiles;
  constexpr int kNTiles = kWarpKeys / 8;
  constexpr int kDTiles = kD / 8;
  static_assert(kWarpKeys % 16 == 0, "P V takes keys in steps of 16");
  using Swz = sm80::SwizzledTile<kD>;

  const AttnFwdArgs& p = dp.args;
  const AttnShape& s = p.shape;
  const AttnMaskParams& m = p.mask_params;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, quad = lane % 4;
  const int row_tile = warp % kRowTiles, key_group = warp / kRowTiles;
  const int64_t split = blockIdx.x;
  const int64_t kvh = blockIdx.y / dp.row_groups, row_group = blockIdx.y % dp.row_groups;
  const int64_t b = blockIdx.z;
  const int64_t group = s.heads / s.kv_heads;
  const int64_t cta_row0 = row_group * kRows;  // first row of this CTA

  extern __shared__ __align__(128) unsigned char decode_smem[];
  T* sQ = reinterpret_cast<T*>(decode_smem);
  T* sK = sQ + kRows * kD;
  T* sV = sK + 2 * kBlockN * kD;

  // Q rows of this CTA (zeros past the last row): row = qi * group + head_in_group.
  {
    constexpr int kChunks = kD / 8;
    for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kDecodeThreads) {
      const int r = idx / kChunks, ch = idx % kChunks;
      const int64_t row = cta_row0 + r;
      const bool ok = row < dp.rows;
      const int64_t qi = ok ? row / group : 0, h = kvh * group + (ok ? row % group : 0);
      const T* src = static_cast<const T*>(p.q) + ((b * s.q_len + qi) * s.heads + h) * kD + ch * 8;
      sm80::CpAsync16(sQ + Swz::Offset(r, ch), src, ok ? 16 : 0);
    }
  }

  // A paged CTA copies its key range's table entries to shared memory
  // (cp.async, in flight while the lengths below are read): the range is the
  // split's chunk plus a block past it (a block starting inside the chunk may
  // end past it), which stays inside the table's max_blocks * block_size keys.
  const int64_t c0 = split * dp.chunk;
  const int64_t c1 = c0 + dp.chunk < s.kv_len ? c0 + dp.chunk : s.kv_len;
  DecodePagedRows rows;
  if (p.paged.on()) {
    rows.pg = p.paged;
    const int64_t stage_end = c1 + kBlockN < s.kv_len ? c1 + kBlockN : s.kv_len;
    const int64_t first = c0 / p.paged.block_size, last = (stage_end - 1) / p.paged.block_size;
    if (c1 > c0 && last - first < kDecodeTableStage) {
      int32_t* s_tbl = reinterpret_cast<int32_t*>(sV + 2 * kBlockN * kD);
      const int32_t* row_tbl = p.paged.block_tables + b * p.paged.max_blocks + first;
      for (int64_t e = threadIdx.x; e <= last - first; e += kDecodeThreads) {
        CpAsync4(s_tbl + e, row_tbl + e, 4);
      }
      rows.s_tbl = s_tbl;
      rows.first = uint32_t(first);
    }
  }
  sm80::CpAsyncCommit();  // Q and the table entries

  // The keys this split covers, narrowed to the union of its rows' allowed
  // keys (bottom-right causal, window, padding): blocks outside are never read.
  int64_t union_lo = c1, union_hi = c0;
  {
    const int64_t last_row = cta_row0 + kRows - 1 < dp.rows - 1 ? cta_row0 + kRows - 1 : dp.rows - 1;
    for (int64_t qi = cta_row0 / group; qi <= last_row / group; ++qi) {
      const KeyRange kr = AllowedKeys(m, s, b, qi);
      if (kr.hi > kr.lo) {
        union_lo = kr.lo < union_lo ? kr.lo : union_lo;
        union_hi = kr.hi > union_hi ? kr.hi : union_hi;
      }
    }
    union_lo = union_lo > c0 ? union_lo : c0;
    union_hi = union_hi < c1 ? union_hi : c1;
  }

  // This thread's two rows (g and g + 8 of the warp's tile) and their keys.
  int64_t lo[2], hi[2], out_row[2];
  bool row_ok[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = cta_row0 + row_tile * 16 + lane / 4 + 8 * r;
    row_ok[r] = row < dp.rows;
    const int64_t qi = row_ok[r] ? row / group : 0;
    const int64_t h = kvh * group + (row_ok[r] ? row % group : 0);
    out_row[r] = (b * s.heads + h) * s.q_len + qi;
    const KeyRange kr = row_ok[r] ? AllowedKeys(m, s, b, qi) : KeyRange{};
    lo[r] = kr.lo > c0 ? kr.lo : c0;
    hi[r] = kr.hi < c1 ? kr.hi : c1;
  }

  const int64_t kv_stride = s.kv_heads * kD;
  const T* k_src = static_cast<const T*>(p.k) + kvh * kD;
  const T* v_src = static_cast<const T*>(p.v) + kvh * kD;
  // A paged pool is read only within the row's context (blocks past it may
  // be stale or another sequence's); a contiguous array up to its length.
  const int64_t limit = p.paged.on() ? ClampLength(m.kv_lengths, b, s.kv_len) : s.kv_len;

  float o[kDTiles][4];
#pragma unroll
  for (int i = 0; i < kDTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};  // max in log2 units

  const int64_t n_blocks = union_hi > union_lo ? (union_hi - union_lo + kBlockN - 1) / kBlockN : 0;
  if (rows.s_tbl != nullptr) {  // the staged entries, for every thread's first loads
    sm80::CpAsyncWait<0>();
    __syncthreads();
  }
  if (n_blocks > 0) {
    DecodeLoadKv<T, kD, kBlockN>(sK, sV, k_src, v_src, kv_stride, union_lo, limit, rows, b, s.kv_len);
  }
  sm80::CpAsyncCommit();  // the first block
  const float scale_log2 = m.scale * kDecodeLog2e;
  const bool softcap = m.softcap > 0.f;

  for (int64_t t = 0; t < n_blocks; ++t) {
    const int buf = int(t & 1);
    const int64_t n0 = union_lo + t * kBlockN;
    if (t + 1 < n_blocks) {
      DecodeLoadKv<T, kD, kBlockN>(sK + (buf ^ 1) * kBlockN * kD, sV + (buf ^ 1) * kBlockN * kD, k_src, v_src,
                                   kv_stride, n0 + kBlockN, limit, rows, b, s.kv_len);
    }
    sm80::CpAsyncCommit();
    sm80::CpAsyncWait<1>();
    __syncthreads();

    const T* tK = sK + buf * kBlockN * kD + key_group * kWarpKeys * kD;
    const T* tV = sV + buf * kBlockN * kD + key_group * kWarpKeys * kD;
    const int64_t j0 = n0 + key_group * kWarpKeys;  // first key of this warp

    // S = Q K^T for this warp's 16 rows and kWarpKeys keys.
    float sc[kNTiles][4];
    WarpScores<T, kD, kWarpKeys>(sc, sQ, row_tile * 16, tK, lane);

    // Logits (log2 units), the rows' key ranges, then the online softmax.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nb = 0; nb < kNTiles; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const int64_t j = j0 + nb * 8 + 2 * quad + (e & 1);
        const float x = softcap ? Logit(m, sc[nb][e]) * kDecodeLog2e : sc[nb][e] * scale_log2;
        sc[nb][e] = (j >= lo[r] && j < hi[r]) ? x : -INFINITY;
        tile_max[r] = fmaxf(tile_max[r], sc[nb][e]);
      }
    }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = fmaxf(row_max[r], tile_max[r]);
      base[r] = new_max == -INFINITY ? 0.f : new_max;  // all masked so far: p = 0, no NaN
      const float correction = exp2f(row_max[r] - base[r]);
      row_max[r] = new_max;
      row_sum[r] *= correction;
#pragma unroll
      for (int i = 0; i < kDTiles; ++i) {
        o[i][2 * r] *= correction;
        o[i][2 * r + 1] *= correction;
      }
    }
#pragma unroll
    for (int nb = 0; nb < kNTiles; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pr = exp2f(sc[nb][e] - base[e / 2]);
        row_sum[e / 2] += pr;
        sc[nb][e] = pr;
      }
    }

    // O += P V.
    WarpAccumulatePV<T, kD, kWarpKeys>(o, sc, tV, lane);
    __syncthreads();  // the next iteration's loads overwrite this buffer
  }
  sm80::CpAsyncWait<0>();

  // Every (row, slot) is written, empty ones as (0, -inf, 0), so phase 2
  // never reads stale workspace.
  const int64_t slot = split * kKeyGroups + key_group;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    if (!row_ok[r]) continue;
    const int64_t at = out_row[r] * dp.slots + slot;
    float* dst = dp.partial_o + at * kD;
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
      *reinterpret_cast<float2*>(dst + i * 8 + 2 * quad) = make_float2(o[i][2 * r], o[i][2 * r + 1]);
    }
    if (quad == 0) {
      *reinterpret_cast<float2*>(dp.partial_ml + at * 2) = make_float2(row_max[r], row_sum[r]);
    }
  }
}

}  // namespace jaxdnn::attention
