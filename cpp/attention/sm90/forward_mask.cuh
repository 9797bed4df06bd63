// Masking and logit transform of the Hopper attention forward's extended path
// (AttnFwdSm90Kernel<..., kExt = true>): padding lengths, causal with the
// bottom-right alignment when q_len < kv_len, a sliding window, softcap and
// segment ids. The rules are those of attention/mask.h (AllowedKeys,
// SameSegment, Logit); this header only re-expresses them for the wgmma
// accumulator layout and for kv blocks of kBlockN keys (128, or 64 at head
// dim 256) and query tiles of 128 rows.
//
// Accumulator layout (one consumer thread, wgmma m64nNk16, f32): element
// s[4 * j + 2 * r + e] is (row0 + 8 * r, n0 + 8 * j + 2 * t + e) with
// row0 = warp * 16 + lane / 4 within the warpgroup's 64 rows, t = lane % 4.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>

namespace jaxdnn::attention::sm90 {

// The extended features; all off (null / -1 / 0) in the dense path.
struct FwdMaskParams {
  const int32_t* q_lengths = nullptr;    // [batch]
  const int32_t* kv_lengths = nullptr;   // [batch]
  const int32_t* q_segments = nullptr;   // [batch, q_len]
  const int32_t* kv_segments = nullptr;  // [batch, kv_len]
  // The forward's segment ranges (attention/sm90/segment_ranges.cuh; set by its
  // launcher whenever there are segment ids): (min, max) id of every 64 keys
  // / query rows, [batch, kv_groups] and [batch, q_groups].
  const int2* kv_seg_ranges = nullptr;
  const int2* q_seg_ranges = nullptr;
  int kv_groups = 0, q_groups = 0;
  int window_left = -1;  // -1: unbounded (the host clamps huge windows to -1)
  int window_right = -1;
  float softcap = 0.f;        // 0: none; else s = softcap * tanh(s * softcap_scale)
  float softcap_scale = 0.f;  // softmax scale / softcap
};

__device__ __forceinline__ int FwdClampLength(const int32_t* lengths, int b, int size) {
  if (lengths == nullptr) return size;
  const int n = __ldg(lengths + b);
  return n < 0 ? 0 : (n > size ? size : n);
}

// Per (batch) geometry: valid lengths and the causal/window diagonal offset
// (diag = row + offset), exactly as AllowedKeys.
struct FwdRowGeom {
  int q_valid, kv_valid, offset;
};

__device__ __forceinline__ FwdRowGeom FwdGeom(const FwdMaskParams& m, int b, int q_len, int kv_len) {
  FwdRowGeom g;
  g.q_valid = FwdClampLength(m.q_lengths, b, q_len);
  g.kv_valid = FwdClampLength(m.kv_lengths, b, kv_len);
  g.offset = (q_len < kv_len && g.kv_valid > g.q_valid) ? g.kv_valid - g.q_valid : 0;
  return g;
}

// Allowed keys lo <= j < hi of query row `row` (AllowedKeys of attention/mask.h).
__device__ __forceinline__ void FwdRowKeys(const FwdMaskParams& m, const FwdRowGeom& g, int causal, int row,
                                           int& lo, int& hi) {
  if (row >= g.q_valid) {
    lo = hi = 0;
    return;
  }
  const int64_t diag = static_cast<int64_t>(row) + g.offset;
  int64_t l = 0, h = g.kv_valid;
  if (causal && diag + 1 < h) h = diag + 1;
  if (m.window_left >= 0 && diag - m.window_left > l) l = diag - m.window_left;
  if (m.window_right >= 0 && diag + m.window_right + 1 < h) h = diag + m.window_right + 1;
  if (h < l) h = l;
  lo = static_cast<int>(l);
  hi = static_cast<int>(h);
}

// The kv blocks [n_lo, n_hi) of kBlockN keys a query tile [q0, q0 + 128) touches
// (lo is non-decreasing and hi non-decreasing in the row, so the band is the
// first valid row's lo to the last valid row's hi). Empty: n_lo == n_hi.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ void FwdTileBlocks(const FwdMaskParams& m, const FwdRowGeom& g, int causal, int q0,
                                              int& n_lo, int& n_hi) {
  const int last = min(q0 + kBlockM, g.q_valid) - 1;
  n_lo = n_hi = 0;
  if (last < q0) return;
  int lo0, hi0, lo1, hi1;
  FwdRowKeys(m, g, causal, q0, lo0, hi0);
  FwdRowKeys(m, g, causal, last, lo1, hi1);
  // A row whose window lies past the keys gets hi = lo > kv_valid (no key):
  // no allowed key is at or past kv_valid.
  hi1 = min(hi1, g.kv_valid);
  if (hi1 <= lo0) return;
  n_lo = lo0 / kBlockN;
  n_hi = (hi1 + kBlockN - 1) / kBlockN;
}

// A ring stage's info word (producer to consumers): n * kFwdInfoBlock + last
// + kind, for kv block n; kind 1: every key in the tile's one segment (the
// band mask only), 2: mixed segments (masked key by key); last =
// kFwdInfoLast on the tile's last block. -1: a tile with no block to load.
constexpr int kFwdInfoLast = 4;
constexpr int kFwdInfoBlock = 8;

// Softcap on the raw q.k products: s = c * tanh(s * scale / c) (the softmax
// then runs with scale 1, i.e. scale_log2 = log2(e)).
template <int N>
__device__ __forceinline__ void FwdSoftcap(float (&s)[N], float cap, float cap_scale) {
#pragma unroll
  for (int i = 0; i < N; ++i) s[i] = cap * tanhf(s[i] * cap_scale);
}

// Sets the elements outside each row's [lo, hi) to -inf; with kSeg also those
// whose key segment (seg: the block's key ids in shared memory) differs
// from the row's query segment qid.
template <bool kSeg, int N>
__device__ __forceinline__ void FwdMaskBlock(float (&s)[N], int n0, const int (&lo)[2], const int (&hi)[2],
                                             int t, const int32_t* seg, const int (&qid)[2]) {
#pragma unroll
  for (int j = 0; j < N / 4; ++j) {
    int kid[2] = {0, 0};
    if constexpr (kSeg) {
      const int2 v = *reinterpret_cast<const int2*>(seg + 8 * j + 2 * t);
      kid[0] = v.x;
      kid[1] = v.y;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = n0 + 8 * j + 2 * t + e;
        bool keep = col >= lo[r] && col < hi[r];
        if constexpr (kSeg) keep = keep && kid[e] == qid[r];
        if (!keep) s[4 * j + 2 * r + e] = -INFINITY;
      }
    }
  }
}

// The ballots of a chunk vote from each lane's block id range [mn, mx]
// (empty: mn > mx) against the tile's [seg_min, seg_max] (see FwdVoteSegmentChunk).
__device__ __forceinline__ void FwdBallotSegmentVotes(bool in_band, int mn, int mx, int seg_min, int seg_max,
                                                      unsigned& may_bits, unsigned& same_bits) {
  const bool may = in_band && mx >= seg_min && mn <= seg_max;
  const bool same = may && seg_min == seg_max && mn == seg_min && mx == seg_min;
  may_bits = __ballot_sync(0xffffffffu, may);
  same_bits = __ballot_sync(0xffffffffu, same);
}

// The id range of the two 64-groups 2i and 2i + 1 of a precomputed range row
// (attention/sm90/segment_ranges.cuh): one 16-byte load.
__device__ __forceinline__ int2 FwdRangeOfGroupPair(const int2* ranges, int i) {
  const int4 v = __ldg(reinterpret_cast<const int4*>(ranges + 2 * i));
  return make_int2(min(v.x, v.z), max(v.y, v.w));
}

// Segment votes of up to 32 kv blocks at once, one block per lane: lane k
// takes block n_top - k (blocks below n_lo are not voted on). A vote block by
// block waits one memory latency per block; on packed documents most blocks of
// a tile are skipped, so that serial wait, not the products, set the time.
// Here every lane has its block's loads in flight together. The vote works on
// the block's min and max id: `may` (some key might share a segment with the
// tile's rows, [seg_min, seg_max]) is conservative, which is safe since a
// kind-2 block is masked element by element; `same` (every key is in the
// tile's one segment) is exact. Bit k of may_bits / same_bits: block n_top - k.
template <int kBlockN>
__device__ __forceinline__ void FwdVoteSegmentChunk(const int32_t* kv_ids, int n_top, int n_lo, int kv_len,
                                                    int seg_min, int seg_max, int lane, unsigned& may_bits,
                                                    unsigned& same_bits) {
  const int n = n_top - lane;
  int mn = INT_MAX, mx = INT_MIN;
  if (n >= n_lo) {
    const int j0 = n * kBlockN;
    const int j1 = min(j0 + kBlockN, kv_len);
    if (j1 - j0 == kBlockN && (reinterpret_cast<uintptr_t>(kv_ids + j0) & 15) == 0) {
      const int4* v4 = reinterpret_cast<const int4*>(kv_ids + j0);
#pragma unroll 4
      for (int i = 0; i < kBlockN / 4; ++i) {
        const int4 v = __ldg(v4 + i);
        mn = min(mn, min(min(v.x, v.y), min(v.z, v.w)));
        mx = max(mx, max(max(v.x, v.y), max(v.z, v.w)));
      }
    } else {
      for (int j = j0; j < j1; ++j) {
        const int v = __ldg(kv_ids + j);
        mn = min(mn, v);
        mx = max(mx, v);
      }
    }
  }
  FwdBallotSegmentVotes(n >= n_lo, mn, mx, seg_min, seg_max, may_bits, same_bits);
}

// The same vote from the precomputed ranges (one batch row of
// kv_seg_ranges): one load per lane instead of kBlockN / 4.
template <int kBlockN>
__device__ __forceinline__ void FwdVoteSegmentRanges(const int2* ranges, int n_top, int n_lo, int seg_min,
                                                     int seg_max, int lane, unsigned& may_bits,
                                                     unsigned& same_bits) {
  static_assert(kBlockN == 64 || kBlockN == 128, "kv blocks of one or two 64-key groups");
  const int n = n_top - lane;
  int mn = INT_MAX, mx = INT_MIN;
  if (n >= n_lo) {
    const int2 v = kBlockN == 128 ? FwdRangeOfGroupPair(ranges, n) : __ldg(ranges + n);
    mn = v.x;
    mx = v.y;
  }
  FwdBallotSegmentVotes(n >= n_lo, mn, mx, seg_min, seg_max, may_bits, same_bits);
}

// The key segment ids of block [n0, n0 + 32 * kPerLane) (128 or 64 keys),
// kPerLane per lane (keys past kv_len: INT_MIN), for FwdStoreSegments.
template <int kPerLane>
__device__ __forceinline__ void FwdLoadSegments(const int32_t* kv_ids, int n0, int kv_len, int lane,
                                                int (&v)[kPerLane]) {
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int j = n0 + lane + 32 * k;
    v[k] = j < kv_len ? __ldg(kv_ids + j) : INT_MIN;
  }
}

template <int kPerLane>
__device__ __forceinline__ void FwdStoreSegments(const int (&v)[kPerLane], int lane, int32_t* ids_smem) {
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) ids_smem[lane + 32 * k] = v[k];
}

// The segment-id range of the 128-row query tile m_block from the
// precomputed ranges (one batch row of q_seg_ranges): a superset of its
// valid rows' range where q_length cuts the tile, which keeps the vote safe
// (`may` is conservative and `same` needs one id over the whole range).
__device__ __forceinline__ void FwdQuerySegmentRangeOfTile(const int2* ranges, int m_block, int& seg_min,
                                                           int& seg_max) {
  const int2 v = FwdRangeOfGroupPair(ranges, m_block);
  seg_min = v.x;
  seg_max = v.y;
}

// The segment-id range of query rows [q0, last] (last < q0 + 128), by one warp.
__device__ __forceinline__ void FwdQuerySegmentRange(const int32_t* q_ids, int q0, int last, int lane,
                                                     int& seg_min, int& seg_max) {
  int mn = INT_MAX, mx = INT_MIN;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int i = q0 + lane + 32 * k;
    if (i <= last) {
      const int v = __ldg(q_ids + i);
      mn = min(mn, v);
      mx = max(mx, v);
    }
  }
  seg_min = __reduce_min_sync(0xffffffffu, mn);
  seg_max = __reduce_max_sync(0xffffffffu, mx);
}

}  // namespace jaxdnn::attention::sm90
