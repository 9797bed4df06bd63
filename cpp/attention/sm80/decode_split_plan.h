// How the split-KV decode forward divides one problem: rows per CTA, key
// groups per CTA, key/value chunks per CTA, and the float32 workspace the
// partial results take. Plain host code, shared by the launcher, the FFI
// handler's gate and the self-test; jaxdnn/attention/primitives.py
// (decode_split_workspace_elems) mirrors DecodeWorkspaceElems exactly.
//
// A CTA has kDecodeWarps warps. Its "rows" are (query position, query head)
// pairs of one key/value head: row = qi * group + head_in_group, so a CTA
// reads each of its key/value bytes once for every query head of the group
// and every query position. Each warp owns a 16-row tile; when the rows need
// fewer tiles than warps, the spare warps split the keys of every block
// ("key groups"), each key group writing its own partial. Rows beyond 64
// (4 tiles) go to further CTAs ("row groups") that stream the same chunk
// (served mostly from L2, as they run side by side).
#pragma once

#include <cstdint>

#include "attention/problem.h"
#include "common/switches.h"

namespace jaxdnn::attention {

constexpr int kDecodeWarps = 4;
// Longest query the decode path takes: up to 16 query positions still fit one
// 16-row tensor-core tile for MHA, and beyond that a prefill kernel with
// 128-row tiles no longer wastes most of its work on padding rows.
constexpr int64_t kDecodeMaxQueryLen = 16;
// Keys per chunk are a multiple of this (every kernel's key block divides it).
constexpr int64_t kDecodeChunkAlign = 64;
// A CTA streams at least this many keys (per kv head: 2 * 512 * D * 2 bytes),
// so its fixed cost (Q load, partial write, combine) stays small.
constexpr int64_t kDecodeMinChunk = 512;
// The chunk floor in force: JAXDNN_ATTENTION_DECODE_MIN_CHUNK (read once),
// for A/Bs of small grids, where a lone CTA's dependent chain of key blocks
// sets the time (b1 x 1k: 8 CTAs of 8 blocks each).
inline int64_t DecodeMinChunk() { return SwitchInt(Switch::kAttentionDecodeMinChunk, kDecodeMinChunk); }
// Splits aim at this many CTAs: several waves' worth on a 132-SM GPU at 2-3
// CTAs per SM, independent of the device (the plan query sizes the
// workspace from the same rule).
constexpr int64_t kDecodeTargetCtas = 1024;

struct DecodeSplitPlan {
  int row_tiles = 1;                                     // 16-row tiles per CTA: 1, 2 or 4
  int key_groups = 4;                                    // kDecodeWarps / row_tiles
  int64_t rows = 0;                                      // q_len * group: rows of one (batch, kv head)
  int64_t row_groups = 1;                                // CTAs along the rows of one (batch, kv head)
  int64_t chunk = 0;                                     // keys per split (a multiple of kDecodeChunkAlign)
  int64_t splits = 1;                                    // CTAs along the key/value length
  int64_t slots() const { return splits * key_groups; }  // partials per output row
};

inline int64_t DecodeCeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline DecodeSplitPlan MakeDecodeSplitPlan(const AttnShape& s) {
  DecodeSplitPlan plan;
  plan.rows = s.q_len * (s.heads / (s.kv_heads > 0 ? s.kv_heads : 1));
  plan.row_tiles = plan.rows <= 16 ? 1 : (plan.rows <= 32 ? 2 : 4);
  plan.key_groups = kDecodeWarps / plan.row_tiles;
  plan.row_groups = DecodeCeilDiv(plan.rows, 16 * plan.row_tiles);
  const int64_t base_ctas = s.batch * s.kv_heads * plan.row_groups;
  const int64_t kv = s.kv_len > 0 ? s.kv_len : 1;
  int64_t splits = base_ctas > 0 ? DecodeCeilDiv(kDecodeTargetCtas, base_ctas) : 1;
  const int64_t most = DecodeCeilDiv(kv, DecodeMinChunk());
  if (splits > most) splits = most;
  if (splits < 1) splits = 1;
  plan.chunk = DecodeCeilDiv(DecodeCeilDiv(kv, splits), kDecodeChunkAlign) * kDecodeChunkAlign;
  plan.splits = DecodeCeilDiv(kv, plan.chunk);
  return plan;
}

// float32 workspace elements for a plan: per output row (batch, head, query)
// and slot, the unnormalized output (head_dim floats) then (max, sum).
inline int64_t DecodeWorkspaceElemsForPlan(const AttnShape& s, const DecodeSplitPlan& plan) {
  return s.batch * s.heads * s.q_len * plan.slots() * (s.head_dim + 2);
}

// Whether the shape alone (not dtype, operands or the environment switch)
// makes splitting pay: a short query, a supported head dim and at least two
// chunks.
inline bool DecodeSplitShapeFits(const AttnShape& s) {
  if (s.batch < 1 || s.q_len < 1 || s.q_len > kDecodeMaxQueryLen || s.kv_len < 1) return false;
  if (s.heads < 1 || s.kv_heads < 1 || s.heads % s.kv_heads != 0) return false;
  if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256) return false;
  return MakeDecodeSplitPlan(s).splits >= 2;
}

// The workspace the forward needs for the decode path on this shape, 0 where
// the shape does not take it. Mirrored by jaxdnn/attention/primitives.py:
// decode_split_workspace_elems.
inline int64_t DecodeWorkspaceElems(const AttnShape& s) {
  return DecodeSplitShapeFits(s) ? DecodeWorkspaceElemsForPlan(s, MakeDecodeSplitPlan(s)) : 0;
}

// paged_attention's decode (a paged pool has no contiguous fallback, so the
// kernel runs whether or not splitting pays): its workspace, 0 where the
// shape is not a decode one. Mirrored by jaxdnn/attention/paged_primitive.py.
inline bool PagedDecodeShapeFits(const AttnShape& s) {
  if (s.batch < 1 || s.q_len < 1 || s.q_len > kDecodeMaxQueryLen || s.kv_len < 1) return false;
  if (s.heads < 1 || s.kv_heads < 1 || s.heads % s.kv_heads != 0) return false;
  return s.head_dim == 64 || s.head_dim == 128 || s.head_dim == 256;
}
inline int64_t PagedDecodeWorkspaceElems(const AttnShape& s) {
  return PagedDecodeShapeFits(s) ? DecodeWorkspaceElemsForPlan(s, MakeDecodeSplitPlan(s)) : 0;
}

}  // namespace jaxdnn::attention
