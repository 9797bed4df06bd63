// Fused Hopper (sm_90a) attention backward kernel: dK, dV and dQ in one pass
// over (key block, query block) pairs (FA3-style), 5 gemms per tile instead of
// the two-kernel backward's 7. Checked on an H200 (docs/perf/attention.md,
// Standing decisions: Fused sm90 backward).
//
// One CTA per (128-key block n, query head h, batch b); 384 threads:
//   warpgroup 0, warp 0 = loader (K, V once; Q, dO, lse*log2e, delta of
//     64-query blocks into a kStages ring), exactly as the dK/dV kernel;
//   warpgroup 0, warp 1 (lane 0) = dQ writer (see "dQ accumulation");
//   warpgroups 1, 2 = consumers of 64 keys each. Per 64-query step m:
//     S^T  = K Q^T, dP^T = V dO^T   (SS wgmma, keys x queries)
//     P^T, dV += P^T dO             (RS, A = P^T registers)
//     dS^T = P^T (dP^T - delta)     -> registers (dsa) AND shared memory
//     dK  += dS^T Q                 (RS, A = dS^T registers)
//     dQ_m = dS K                   (SS, A = dS from shared memory)
//
// The dS transpose: the consumers hold dS^T (rows = keys, columns = queries)
// as wgmma accumulator fragments. They store it, as 16-bit pairs, unchanged
// into a [128 keys][64 queries] 128-byte-swizzled shared tile (32-bit stores,
// conflict-free). Read as the A operand of dQ = dS K (M = queries, K = keys)
// that tile is MN-major (M contiguous), which wgmma supports for 16-bit types
// via imm-trans-a = 1; B = K (N = head dim contiguous) is MN-major too
// (imm-trans-b = 1), the same layout the RS products use. So no register
// transpose, no stmatrix.trans, no second copy.
//   D = 128: consumer warpgroup cw computes dQ_m[:, 64cw, +64) over all 128
//     keys (A = the whole dS tile, written half by each warpgroup -> one
//     256-thread named barrier per step; dS is double-buffered so the other
//     warpgroup's next-step stores cannot race this step's dQ gemm).
//   D = 64: a 32-column N split would cut a 128-byte swizzle atom, so each
//     warpgroup computes the full 64x64 dQ_m over its own 64 keys (A = its own
//     half of dS: a 128-thread barrier), and the two partials are summed in
//     shared memory in a fixed order (warpgroup 1 stores, warpgroup 0 adds).
//   D = 96 (JAXDNN_ATTENTION_SM90_BWD_FUSED_D96, default on): as D = 64, at
//     N = 96 (m64n96k16, B = K over one and a half panels); K, V, Q and dO in
//     two 128-byte panels, the second half zero-filled by TMA and never read;
//     64-query steps, 3 stages, 1 dQ buffer.
//
// dQ accumulation (deterministic): the consumers store dQ_m (float32) into a
// shared [64][D] buffer (kDqBufs-deep ring, 16-byte chunks XOR-swizzled by
// row & 7 against bank conflicts; the global accumulator uses the same
// permutation and the convert kernel undoes it) and arrive on dq_full. The
// writer lane waits for it, then (key block n > 0) spins with ld.acquire.gpu
// until the per-(b, h, m) int32 counter equals n, issues ONE bulk async copy
// of the 64xD block to the float32 accumulator (key block 0: plain bulk
// store, so the accumulator needs no zeroing; n > 0: cp.reduce.async.bulk
// .add.f32), frees the buffer once the copy has read it, waits for the copy's
// writes to complete and stores counter = n + 1 with st.release.gpu. The
// consumers never touch the semaphore: its wait is off their critical path
// unless the ring is full.
//
// Wide steps (kOpts bit kFusedOptWideSteps, D = 64 only, opt-in): 128-query
// steps, FlashAttention-3's hdim64 tiling. S^T, dP^T are 64 keys x 128 queries
// per warpgroup; the dS tile is [128 keys][128 queries] as two 64-query
// panels; consumer warpgroup cw computes dQ for queries [64cw, 64cw + 64) of
// the step over all 128 keys (A = dS panel cw, written half by each
// warpgroup: the 256-thread barrier and double buffer of D = 128), so there
// is no partial sum. The dQ buffer is [128][64] float32 = two 64-row blocks
// laid out as the accumulator's, which the writer adds with two bulk ops
// (64-row blocks 2M and 2M + 1, the second skipped past num_m): the
// accumulator layout, counters and convert kernel are the 64-query ones.
// Step order is FlashAttention-3's (registers: 64 + 64 score floats):
// S^T, dP^T -> P^T -> dS^T -> pack both -> dS stores -> dV -> barrier -> dQ
// -> dK -> stage dQ under dK.
//
// 80-query steps (kOpts bit kFusedOptQ80, D = 128, unordered dQ only,
// opt-in): FlashAttention-3's hdim128 non-causal tiling (causal below, not
// yet run on a GPU). S^T, dP^T are
// m64n80k16 (64 keys x 80 queries per warpgroup), dV and dK RS with K = 80.
// A 64-row wgmma cannot produce 80 dQ rows, so dQ is formed transposed:
// consumer warpgroup cw computes dQ^T[64cw, +64)[80 queries] = K^T dS^T over
// all 128 keys (A = K panel cw, MN-major; B = the dS^T tile, MN-major). 80
// query columns are 5 blocks of 16, which a 128-byte swizzle atom (64
// columns) cannot tile, so the dS^T tile is 32-byte swizzled (Q80DsOffset).
// The dQ^T fragment is staged transposed (4-byte stores) into an [80][D]
// float32 buffer keyed by row & 7; step M's rows are accumulator rows 80M ..
// 80M + 79, contiguous in the [rows][D] accumulator, and 80M = 0 mod 8 keeps
// the key, so the writer adds the step with one bulk reduce and the convert
// kernel is the unrotated 64-query one (fp.num_m counts 64-row blocks
// covering ceil(q_len / 80) * 80 rows). FA3 step order as for wide steps;
// 2 stages, 1 dQ buffer (226 KB of shared memory).
// Causal (top-left, q_len == kv_len; docs/perf/attention.md, Standing
// decisions: 80-query steps at d128): steps stay at multiples of 80 and key
// block n starts at step floor(128n / 80), the one holding its first key's
// diagonal query; MaskEarlierQueries zeroes P^T on
// every step with a query below the block's last key (80m < 128n + 128: 2-3
// steps), including the rows of the first step before 128n. With
// kFusedOptQ80Diag the steps of key block n start at its diagonal instead,
// 128n + 80i (multiples of 16, so the staging key row & 7 still matches the
// accumulator's): no rows before the diagonal, exactly 2 masked steps, and
// the last step's rows past q_len are not added (its reduce-add is cut at
// q_len: the accumulator covers ceil(q_len / 80) * 80 rows, not q_len + 79).
//
// Ordering with causal masking (q_len == kv_len, the only causal case): key
// block n covers query blocks m >= 2n (64-query blocks, 128-key blocks), so
// the key blocks touching query block m are exactly n = 0 .. floor(m/2), a
// prefix: the expected counter value for key block n is n at every m it
// touches, and no key block ever skips a query block that a higher key block
// touches. Non-causal: every key block touches every query block. Wide
// steps: key block n covers 128-query steps M >= n, i.e. 64-row blocks
// >= 2n, the same prefix sets; the writer waits and adds per 64-row block.
//
// Segments (kOpts bit kFusedOptSeg; packed documents: segment ids alone, causal
// only top-left with q_len == kv_len; packed-document fwd+bwd 13% faster than
// on the two-kernel backward: docs/perf/attention.md, Standing decisions:
// Segment ids on the fused kernel): 64-query steps. A pre-pass stores each
// step's (min, max) query id; the loader votes 32 steps at a time (one per
// lane) against the key block's id range and skips the steps that cannot share
// a segment with it (no loads, no MMAs, no dQ), handing each loaded step's m
// and kind to the consumers through a per-stage slot (kind 2, mixed segments:
// the step's query ids too, and the consumers set S^T to -inf where ids differ,
// so P = dS = 0 there), then a terminator. The consumers pass each staged dQ
// block's m to the writer the same way. Unordered: the writer reduce-adds the
// staged blocks. Ordered: the accumulator is zeroed (key block 0 may skip a
// block) and every key block reduce-adds under the counters, waiting for its
// rank among the key blocks that take that query block (FusedSegWriter), not
// for n: the prefix rule below is the dense case's.
// With kFusedOptQ80 (unordered, D = 128; docs/perf/attention.md, Standing
// decisions: 80-query steps at d128): the 80-query steps, from each key block's
// diagonal when causal (kFusedOptQ80Diag). Their first rows 128n + 80i are
// multiples of 16 but not of 64, so the pre-pass stores the (min, max) of the
// 80 rows from every multiple of 16 instead (AttnBwdFusedSegRangeQ80Kernel):
// one load per step in the vote, as before (FusedSegLoaderQ80); the consumers
// hand the writer the step's first row.
//
// Unordered mode (kOrdered = false, for deterministic=False, opt-in): the
// accumulator is zeroed by a memset first and every key block reduce-adds
// its dQ block as soon as it is staged; no counters, no waiting.
//
// Ordered mode only: deadlock freedom relies on in-order CTA dispatch (as FA3's deterministic
// mode does): the grid is (batch*heads, key blocks) with blockIdx.y = n, so
// key block n - 1 of the same (b, h) has a lower linear block id and is
// resident or finished whenever key block n is. Key block 0 never waits.
#pragma once

#include <type_traits>

#include "attention/sm90/backward_common.cuh"
#include "attention/sm90/backward_dkdv_smem.cuh"
#include "attention/sm90/backward_key_block.cuh"
#include "attention/sm90/backward_pipeline_init.cuh"
#include "attention/sm90/backward_dkdv_store.cuh"
#include "attention/sm90/backward_scores.cuh"
#include "attention/sm90/backward_mask.cuh"
#include "attention/sm90/blocks.cuh"

namespace jaxdnn::attention::sm90 {

// ---------------------------------------------------------------------------
struct FusedBwdParams {
  BwdParams base;
  float* dq_accum;  // [batch, heads, num_m * 64, D] float32, 16-byte chunks of a row XOR (row & 7)
  int* counters;    // [batch, heads, num_m] int32, zero before the fused kernel
  int num_m;        // 64-row dQ blocks: ceil(q_len / 64); 80-query steps: Sm90FusedBwdDqBlocks
  // Unordered mode only: 1 = head-major 1-D grid (blockIdx.x = bh * key
  // blocks + n: the key blocks of a (batch, head) run together, sharing its
  // Q, dO and dQ accumulator in L2) with each key block starting its query
  // blocks at a different one (fewer reduce-adds to the same dQ block at
  // once); 0 = the ordered mode's grid (blockIdx.y = n) and order.
  int head_major;
  // With head_major: the (batch, head)s go in groups of head_group (>= 1),
  // key-block-major within a group (blockIdx.x = group's first CTA + n *
  // group size + head in group), so the heaviest (causal: lowest) key blocks
  // of the last group start first, not last: a shorter tail. 1 = every
  // (batch, head)'s key blocks in a row, as before.
  int head_group;
  // kFusedOptSeg only: segment ids [batch, q_len] and [batch, kv_len], and
  // the (min, max) id of each 64-query step [batch, num_m] and 128-key block
  // [batch, ceil(kv_len / 128)] (workspace, AttnBwdFusedSegRangeKernel);
  // with kFusedOptQ80, q_seg_range holds the range of the 80 rows from each
  // multiple of 16 instead [batch, ceil(q_len / 16)]
  // (AttnBwdFusedSegRangeQ80Kernel).
  const int32_t* q_segments;
  const int32_t* kv_segments;
  int2* q_seg_range;
  int2* kv_seg_range;
};

// kFusedOptSeg: whether key block `k` (its id range) may share a segment with
// query step `q` (its id range). The loader of a key block and the dQ writer
// of every later one evaluate it identically (the ordered mode's ranks).
__device__ __forceinline__ bool FusedSegMay(int2 q, int2 k) { return q.y >= k.x && q.x <= k.y; }

// kWide: 128-query steps at D = 64 (kFusedOptWideSteps); kQ80: 80-query
// steps at D = 128 (kFusedOptQ80); kSeg: segment ids (kFusedOptSeg).
template <int kD_, int kStages_, int kDqBufs_, bool kWide = false, bool kQ80 = false, bool kSeg = false>
struct FusedBwdConfig {
  static constexpr int kD = kD_;
  static_assert(kD == 64 || kD == 96 || kD == 128, "head dim 64, 96 or 128");
  static_assert(!kWide || kD == 64, "128-query steps at head dim 64 only");
  static_assert(!kQ80 || kD == 128, "80-query steps at head dim 128 only");
  static_assert(kD != 96 || !kSeg, "no segment path at head dim 96");
  static constexpr int kThreads = 384;
  static constexpr int kBlockN = 128;                           // keys per CTA (2 consumers x 64)
  static constexpr int kBlockM = kWide ? 128 : kQ80 ? 80 : 64;  // queries per step
  static constexpr int kStages = kStages_;
  static constexpr int kDqBufs = kDqBufs_;
  // dQ: split keys (D = 64, 96) or head dim (D = 128); wide: split queries
  // (neither). At 96 a 48-column split would start a warpgroup's B operand
  // inside a 128-byte swizzled row, so each warpgroup forms all 96 columns
  // over its own keys, as at 64.
  static constexpr bool kSplitKeys = (kD == 64 || kD == 96) && !kWide;
  // 128-byte panels: head dim 96 takes two, the second half zero-filled by
  // TMA and never read (the gemms run over the head dim's own columns).
  static constexpr int kDBlocks = (kD + 63) / 64;
  static constexpr int kKBytes = kBlockN * kDBlocks * 128;
  static constexpr int kQBytes = kBlockM * kDBlocks * 128;
  // dQ columns one warpgroup forms per step: all of them over its own keys
  // (split keys), else 64 (its panel of 128, or with wide steps its queries).
  static constexpr int kDqCols = kSplitKeys ? kD : 64;
  // [128 keys][kBlockM queries] 16-bit, as kBlockM / 64 panels of [128 keys][64 queries].
  static constexpr int kDsBytes = kBlockN * kBlockM * 2;
  static constexpr int kDsPanelBytes = kBlockN * 64 * 2;
  static constexpr int kDqBytes = kBlockM * kD * 4;  // [kBlockM queries][D] float32
  static constexpr int kDqBlockBytes = 64 * kD * 4;  // one 64-row accumulator block
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kKBytes;
  static constexpr int kOffQ = kOffV + kKBytes;
  static constexpr int kOffDO = kOffQ + kStages * kQBytes;
  static constexpr int kOffDs = kOffDO + kStages * kQBytes;
  static constexpr int kOffDq = kOffDs + 2 * kDsBytes;
  static constexpr int kOffLse = kOffDq + kDqBufs * kDqBytes;
  static constexpr int kOffDelta = kOffLse + kStages * kBlockM * 4;
  static constexpr int kOffBar = kOffDelta + kStages * kBlockM * 4;
  static constexpr int kNumBars = 1 + 2 * kStages + 2 * kDqBufs;
  // kSeg: per ring stage the step's info word (m * 4 + kind, -1 = the
  // terminator) and its query segment ids; per dQ buffer its step m (-1 =
  // the terminator), for the writer. Past the barriers: the dense layout is
  // unchanged.
  static constexpr int kOffInfo = kOffBar + kNumBars * 8;
  static constexpr int kOffDqInfo = kOffInfo + kStages * 4;
  static constexpr int kOffSeg = (kOffDqInfo + kDqBufs * 4 + 15) / 16 * 16;
  // kSeg: the loader's per-CTA values it re-reads instead of holding them in
  // its 24 registers (8 int32).
  static constexpr int kOffLoaderVals = kOffSeg + kStages * kBlockM * 4;
  static constexpr int kSmemBytes = (kSeg ? kOffLoaderVals + 32 : kOffBar + kNumBars * 8) + 1024;
  static_assert(kSmemBytes <= 232448, "over the sm_90 227 KB dynamic shared memory limit");
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
};

// Named barrier ids (0 is __syncthreads).
constexpr int kFusedBarDs = 1;      // both consumer warpgroups: dS tile complete (D = 128)
constexpr int kFusedBarDqXchg = 2;  // both consumer warpgroups: dQ partial exchange (D = 64, 96)
constexpr int kFusedBarDsWg = 3;    // + cw: one consumer warpgroup's dS half complete (D = 64, 96)

// Step-order options (kOpts bits; A/B through the host launcher's variant,
// see attention/sm90/backward_fused.h). Same results bit for bit: only the
// order in which the same operations are issued changes.
// kFusedOptDqFirst: dK's first half, the dS barrier, dQ, dK's second half,
//   then dQ is staged while dK's second half runs (FlashAttention-3's tail
//   order; the default waits for dQ and dK together, then stages dQ).
// kFusedOptTmaFirst: the loader issues the Q/dO TMA before its lse/delta
//   loads, so the copy does not wait for a dependent L2 round trip.
// kFusedOptWideSteps: D = 64 with 128-query steps (see the header); its own
//   step order (kFusedOptDqFirst does not apply), 2 stages, 1 dQ buffer.
// kFusedOptDqRot: the dQ staging buffer's 16-byte chunks XOR-swizzled by
//   DqSwizzleKey(row & 7) instead of row & 7 (see there).
constexpr int kFusedOptDqFirst = 2;
constexpr int kFusedOptTmaFirst = 4;
constexpr int kFusedOptWideSteps = 8;
constexpr int kFusedOptDqRot = 32;
// kFusedOptQ80: D = 128, unordered: 80-query steps (see the header).
constexpr int kFusedOptQ80 = 128;
// kFusedOptQ80Diag: with kFusedOptQ80, causal: each key block's 80-query
// steps start at its diagonal row (see the header); no effect non-causal.
constexpr int kFusedOptQ80Diag = 16;
// kFusedOptSeg: segment ids (packed documents; see "Segments" in the header).
// 64-query steps, or with kFusedOptQ80 (unordered) 80-query ones; not with
// kFusedOptWideSteps or the kFusedOptDqFirst order.
constexpr int kFusedOptSeg = 256;
// kFusedOptSeg with kFusedOptQ80: the pre-pass's id ranges start every 16
// rows (each 80-query step, diagonal or not, starts at a multiple of 16).
constexpr int kSegQ80GroupRows = 16;

// kFusedOptQ80's dS^T tile, the MN-major B operand of dQ^T = K^T dS^T with
// the 32-byte swizzle: 5 blocks of 16 queries (LBO = 4096 bytes apart), each
// 128 keys x 32 bytes in 8-key atoms (SBO = 256); within an atom the 16-byte
// chunk (query bit 3) is XORed with key bit 2. A warp's 32-bit stores of one
// fragment column pair (keys g, queries 2t) hit 32 distinct banks.
constexpr int kQ80DsBlockBytes = 128 * 32;
__device__ __forceinline__ uint32_t Q80DsOffset(int key, int query) {
  const int chunk = ((query >> 3) & 1) ^ ((key >> 2) & 1);
  return (query >> 4) * kQ80DsBlockBytes + (key >> 3) * 256 + (key & 7) * 32 + (chunk << 4) + (query & 7) * 2;
}
// kFusedOptQ80's dQ staging buffer: [80 queries][kD] float32, 16-byte chunks
// XOR (row & 7) (the accumulator's unrotated layout). The dQ^T fragment gives
// a thread one column of rows 2t, 2t + 1: with this key a warp's 4-byte
// stores cover 32 distinct banks (DqSwizzleKey would collide 2-way).
template <int kD>
__device__ __forceinline__ uint32_t Q80DqOffset(int row, int col) {
  return row * (kD * 4) + ((((col >> 2) ^ (row & 7))) << 4) + (col & 3) * 4;
}
// kFusedOptQ80Diag, causal: key block n walks ceil((q_len - 128n) / 80)
// steps counted from 0 (first query row Q80DiagRow0); otherwise `c` as it is.
template <bool kDiag, int kBlockN, int kBlockM>
__device__ __forceinline__ BwdKeyBlock Q80DiagSteps(const BwdParams& p, BwdKeyBlock c) {
  if constexpr (kDiag) {
    if (p.causal) {
      c.m_begin = 0;
      c.m_count = (p.q_len - c.n_block * kBlockN + kBlockM - 1) / kBlockM;  // q_len == kv_len > 128n
    }
  }
  return c;
}

// The dQ staging stores are 8 bytes per lane, which the hardware serves per
// half-warp: rows g = 0..3 (or 4..7), chunks 2j and 2j + 1. Keyed by g, the
// XOR maps {2j ^ g} and {(2j + 1) ^ g} over g = 0..3 onto the same four
// chunks: a 2-way bank conflict on every store (ncu on an H200: 2.8-3.8
// wavefronts per shared store request in the fused backward). Keyed by g
// rotated left by one bit, each half-warp's four rows differ in bits 1-2 of
// the key, so its 16 lanes cover all 32 banks once. A bijection of 0..7, so
// the accumulator (which the bulk copies give the same layout) stays a
// permutation within each row's aligned 8-chunk groups; the convert kernel
// undoes it.
__host__ __device__ constexpr int DqSwizzleKey(int row7) { return ((row7 << 1) | (row7 >> 2)) & 7; }

// Both segment loaders' first per-CTA values: vals[0..1] = the key block's
// valid keys' id range (the pre-pass's table), vals[2..3] = row_off, the
// (batch, head)'s lse/delta row offset (int64 as two halves).
template <int kBlockN>
__device__ __forceinline__ void StoreSegLoaderBlockVals(const BwdParams& p, const FusedBwdParams& fp,
                                                        const BwdKeyBlock& cta, int64_t row_off,
                                                        volatile int32_t* vals) {
  const int2 kr = fp.kv_seg_range[cta.b * ((p.kv_len + kBlockN - 1) / kBlockN) + cta.n_block];
  vals[0] = kr.x;
  vals[1] = kr.y;
  vals[2] = static_cast<int32_t>(row_off);
  vals[3] = static_cast<int32_t>(row_off >> 32);
}

// kFusedOptSeg's loader walk (one warp; see "Segments" in the header): the
// key block's query steps from the diagonal (causal) up, voted on 32 at a
// time, one step per lane, by the step's query id range (precomputed:
// fp.q_seg_range) against the key block's: a step none of whose queries can
// share a segment with a key is not loaded at all (conservative for
// arbitrary ids; the consumers mask by element). The others go into the ring
// with an info word (m * 4 + kind; kind 0: every key and query in one
// segment, 2: mask by segment, with the step's query ids), then a terminator
// slot (-1, no data). Within the warpgroup's 24 registers (one load per lane
// per 32 steps; offsets kept, pointers formed where used).
template <class Cfg, bool kTmaFirst>
__device__ __forceinline__ void FusedSegLoader(const BwdParams& p, const FusedBwdParams& fp,
                                               const DkDvSmem<Cfg>& sm, uint8_t* smem, const BwdKeyBlock& cta,
                                               const CUtensorMap* tm_q, const CUtensorMap* tm_do, int lane) {
  constexpr int kBlockN = Cfg::kBlockN, kBlockM = Cfg::kBlockM, kStages = Cfg::kStages;
  static_assert(kBlockM == 64, "64-query steps (fp.q_seg_range)");
  int32_t* info_smem = reinterpret_cast<int32_t*>(smem + Cfg::kOffInfo);
  int32_t* seg_smem = reinterpret_cast<int32_t*>(smem + Cfg::kOffSeg);
  // The key block's id range, the (batch, head)'s lse/delta row offset and
  // the batch's query id row offset, kept in shared memory (volatile:
  // re-read where used, not held in registers; 24 would spill).
  volatile int32_t* vals = reinterpret_cast<volatile int32_t*>(smem + Cfg::kOffLoaderVals);
  {
    const int64_t row_off = (static_cast<int64_t>(cta.b) * p.heads + cta.h) * p.q_len;
    if (lane == 0) {
      StoreSegLoaderBlockVals<kBlockN>(p, fp, cta, row_off, vals);
      const int64_t qid_off = static_cast<int64_t>(cta.b) * p.q_len;
      vals[4] = static_cast<int32_t>(qid_off);
      vals[5] = static_cast<int32_t>(qid_off >> 32);
      // 32-bit: batch * heads * blocks < 2^31 (Sm90BackwardSupports).
      vals[6] = cta.b * cta.num_m;  // the batch's first step in fp.q_seg_range
    }
    __syncwarp();
  }
  int it = 0;
  for (int m0 = cta.m_begin; m0 < cta.num_m; m0 += 32) {
    // Lane k: step m0 + k.
    bool may = false, same = false;
    if (m0 + lane < cta.num_m) {
      const int2 r = fp.q_seg_range[vals[6] + m0 + lane];
      const int seg_min = vals[0], seg_max = vals[1];
      may = FusedSegMay(r, make_int2(seg_min, seg_max));
      same = may && seg_min == seg_max && r.x == seg_min && r.y == seg_min;
    }
    unsigned may_bits = __ballot_sync(0xffffffffu, may);
    const unsigned same_bits = __ballot_sync(0xffffffffu, same);
    __syncwarp();  // every lane's reads of vals[7] (the last chunk's) done
    if (lane == 0) vals[7] = static_cast<int32_t>(same_bits);  // re-read per step (registers)
    __syncwarp();
    // The steps voted in, ascending (the dQ writer passes the ordered mode's
    // turns in that order); the others are skipped.
    while (may_bits != 0) {
      const int k = __ffs(may_bits) - 1;
      may_bits &= may_bits - 1;
      const int m = m0 + k;
      const int kind = ((static_cast<uint32_t>(vals[7]) >> k) & 1u) ? 0 : 2;
      int ids[kBlockM / 32];
      if (kind == 2) {
        const int64_t qid_off =
            static_cast<int64_t>(static_cast<uint32_t>(vals[4])) | (static_cast<int64_t>(vals[5]) << 32);
        BwdLoadSegments<kBlockM>(fp.q_segments + qid_off, m * kBlockM, p.q_len, lane, ids);
      }
      const int st = it % kStages;
      MbarWait(&sm.q_empty[st], ((it / kStages) & 1) ^ 1);
      if constexpr (kTmaFirst) {
        if (lane == 0) {
          MbarExpectTx(&sm.q_full[st], 2 * Cfg::kQBytes);
          sm.LoadQdo(st, tm_q, tm_do, cta.h, m * kBlockM, cta.b);
        }
      }
      const int64_t row_off =
          static_cast<int64_t>(static_cast<uint32_t>(vals[2])) | (static_cast<int64_t>(vals[3]) << 32);
#pragma unroll
      for (int e = 0; e < kBlockM / 32; ++e) {
        const int qi = m * kBlockM + lane + 32 * e;
        const bool in = qi < p.q_len;
        // BwdLse2: a query no key may see (lse = -inf) gets P = 0, not NaN.
        sm.lse[st * kBlockM + lane + 32 * e] = in ? BwdLse2(p.lse[row_off + qi]) : INFINITY;
        sm.delta[st * kBlockM + lane + 32 * e] = in ? p.delta[row_off + qi] : 0.f;
      }
      if (kind == 2) BwdStoreSegments<kBlockM>(ids, lane, seg_smem + st * kBlockM);
      if (lane == 0) info_smem[st] = m * 4 + kind;
      if constexpr (kTmaFirst) {
        MbarArrive(&sm.q_full[st]);
      } else if (lane == 0) {
        MbarArriveExpectTx(&sm.q_full[st], 2 * Cfg::kQBytes);
        sm.LoadQdo(st, tm_q, tm_do, cta.h, m * kBlockM, cta.b);
      } else {
        MbarArrive(&sm.q_full[st]);
      }
      ++it;
    }
  }
  PublishEndSlot<kStages>(sm.q_empty, sm.q_full, info_smem, it, lane);
}

// kFusedOptSeg's dQ writer: takes the staged steps in the loader's order
// (their m from the buffer's slot, -1 = done). Unordered (lane 0 only):
// reduce-adds each. Ordered (the whole warp): the accumulator is zeroed first
// and every key block reduce-adds, in key-block order among the key blocks
// that add to that query block: key block n waits until the block's counter
// equals its rank, the number of key blocks n' < n whose loaders took the
// step (FusedSegMay on the pre-pass's id ranges, the loaders' own rule; with
// causal every n' < n covers the step), then stores rank + 1. A key block
// that skips a step never touches its counter, so packed documents do not
// chain across documents; arbitrary ids stay ordered (the rank counts
// whatever the vote took).
template <class Cfg, bool kOrdered>
__device__ __forceinline__ void FusedSegWriter(const BwdParams& p, const FusedBwdParams& fp, uint8_t* smem,
                                               const BwdKeyBlock& cta, uint64_t* dq_full, uint64_t* dq_empty,
                                               int lane) {
  constexpr int kD = Cfg::kD, kDqBufs = Cfg::kDqBufs, kBlockN = Cfg::kBlockN;
  // 24 registers (the loader warpgroup's): offsets from the (batch, head)'s
  // first block, pointers formed where used.
  const int64_t first_m = static_cast<int64_t>(cta.bh) * cta.num_m;
#pragma unroll 1
  for (int it = 0;; ++it) {
    const int bq = it % kDqBufs;
    MbarWait(&dq_full[bq], (it / kDqBufs) & 1);
    const int m = reinterpret_cast<const volatile int32_t*>(smem + Cfg::kOffDqInfo)[bq];
    if (m < 0) break;
    int rank = 0;
    if constexpr (kOrdered) {
      // 32-bit indices: batch * heads * blocks < 2^31 (Sm90BackwardSupports).
      const int num_n = (p.kv_len + kBlockN - 1) / kBlockN;
      const int2 qr = fp.q_seg_range[cta.b * cta.num_m + m];
#pragma unroll 1
      for (int n0 = 0; n0 < cta.n_block; n0 += 32) {
        const bool took =
            n0 + lane < cta.n_block && FusedSegMay(qr, fp.kv_seg_range[cta.b * num_n + n0 + lane]);
        rank += __popc(__ballot_sync(0xffffffffu, took));
      }
    }
    if (lane == 0) {
      if constexpr (kOrdered) {
        const int* cnt = fp.counters + first_m + m;
#if defined(JAXDNN_SM90_HANG_TRAP)
        long long spins = 0;
        while (LdAcquireGpu(cnt) != rank) {
          if (++spins > (1ll << 26)) __trap();
          __nanosleep(64);
        }
#else
        while (LdAcquireGpu(cnt) != rank) __nanosleep(32);
#endif
        FenceProxyAsyncGlobal();  // the acquire above before the async-proxy reduction
      }
      BulkReduceAddF32S2G(fp.dq_accum + (first_m + m) * 64 * kD,
                          SmemAddr(smem + Cfg::kOffDq) + bq * Cfg::kDqBytes, Cfg::kDqBytes);
      BulkCommitGroup();
      BulkWaitGroupRead<0>();
      MbarArrive(&dq_empty[bq]);
      if constexpr (kOrdered) {
        BulkWaitGroupAll();
        FenceProxyAsyncGlobal();  // the async-proxy writes before the generic release
        __threadfence();
        StReleaseGpu(fp.counters + first_m + m, rank + 1);
      }
    }
    __syncwarp();
  }
  if constexpr (!kOrdered) {
    if (lane == 0) BulkWaitGroupAll();  // every reduce-add complete before the CTA exits
  }
}

// kFusedOptSeg with kFusedOptQ80 (unordered): FusedSegLoader for 80-query
// steps. The key block's steps start at rows row_begin + 80i below q_len
// (row_begin = 128n with kFusedOptQ80Diag, causal; else 80 m_begin), each a
// multiple of 16, so a step's exact id range (rows below q_len; those past
// it have lse = +inf, P = 0) is fp.q_seg_range[row / 16]. Kinds, ring and
// terminator as FusedSegLoader; the info word is row * 4 + kind (the
// consumers and the writer want the row, not a step index: registers); 80
// rows are 2.5 per lane.
template <class Cfg, bool kTmaFirst>
__device__ __forceinline__ void FusedSegLoaderQ80(const BwdParams& p, const FusedBwdParams& fp,
                                                  const DkDvSmem<Cfg>& sm, uint8_t* smem,
                                                  const BwdKeyBlock& cta, int row_begin,
                                                  const CUtensorMap* tm_q, const CUtensorMap* tm_do,
                                                  int lane) {
  constexpr int kBlockN = Cfg::kBlockN, kBlockM = Cfg::kBlockM, kStages = Cfg::kStages;
  constexpr int kG = kSegQ80GroupRows, kRounds = (kBlockM + 31) / 32;
  static_assert(kBlockM == 80 && kBlockM % kG == 0, "80-query steps of 16-row groups");
  int32_t* info_smem = reinterpret_cast<int32_t*>(smem + Cfg::kOffInfo);
  int32_t* seg_smem = reinterpret_cast<int32_t*>(smem + Cfg::kOffSeg);
  // As FusedSegLoader: per-CTA values re-read from shared memory (24
  // registers), here also the current vote chunk's first row (vals[5]).
  volatile int32_t* vals = reinterpret_cast<volatile int32_t*>(smem + Cfg::kOffLoaderVals);
  {
    const int64_t row_off = (static_cast<int64_t>(cta.b) * p.heads + cta.h) * p.q_len;
    if (lane == 0) {
      StoreSegLoaderBlockVals<kBlockN>(p, fp, cta, row_off, vals);
      vals[4] = cta.b;  // the query ids' row: b * q_len
      vals[5] = row_begin;
      // The batch's first range in fp.q_seg_range (batch * ceil(q_len / 16)
      // < 2^31: fewer than batch * heads * q_len).
      vals[6] = cta.b * ((p.q_len + kG - 1) / kG);
    }
    __syncwarp();
  }
  int it = 0;
  for (;;) {
    const int r0 = vals[5];
    if (r0 >= p.q_len) break;
    // Lane k: the step at row r0 + 80k, its range at index row / 16.
    bool may = false, same = false;
    if (r0 + lane * kBlockM < p.q_len) {
      const int2 r = fp.q_seg_range[vals[6] + (r0 + lane * kBlockM) / kG];
      const int seg_min = vals[0], seg_max = vals[1];
      may = FusedSegMay(r, make_int2(seg_min, seg_max));
      same = may && seg_min == seg_max && r.x == seg_min && r.y == seg_min;
    }
    unsigned may_bits = __ballot_sync(0xffffffffu, may);
    const unsigned same_bits = __ballot_sync(0xffffffffu, same);
    __syncwarp();  // every lane's reads of vals[7] (the last chunk's) done
    if (lane == 0) vals[7] = static_cast<int32_t>(same_bits);
    __syncwarp();
    while (may_bits != 0) {
      const int k = __ffs(may_bits) - 1;
      may_bits &= may_bits - 1;
      const int row = vals[5] + k * kBlockM;
      const int kind = ((static_cast<uint32_t>(vals[7]) >> k) & 1u) ? 0 : 2;
      int ids[kRounds];
      if (kind == 2) {
        // The step's query ids (INT_MIN past q_len; those rows have P = 0 anyway).
        const int64_t qid_off = static_cast<int64_t>(vals[4]) * p.q_len;
#pragma unroll
        for (int e = 0; e < kRounds; ++e) {
          const int qi = row + lane + 32 * e;
          ids[e] = lane + 32 * e < kBlockM && qi < p.q_len ? __ldg(fp.q_segments + qid_off + qi) : INT_MIN;
        }
      }
      const int st = it % kStages;
      MbarWait(&sm.q_empty[st], ((it / kStages) & 1) ^ 1);
      if constexpr (kTmaFirst) {
        if (lane == 0) {
          MbarExpectTx(&sm.q_full[st], 2 * Cfg::kQBytes);
          sm.LoadQdo(st, tm_q, tm_do, cta.h, row, cta.b);
        }
      }
      const int64_t row_off =
          static_cast<int64_t>(static_cast<uint32_t>(vals[2])) | (static_cast<int64_t>(vals[3]) << 32);
#pragma unroll
      for (int e = 0; e < kRounds; ++e) {
        if (lane + 32 * e >= kBlockM) break;  // 2.5 rounds
        const int qi = row + lane + 32 * e;
        const bool in = qi < p.q_len;
        // BwdLse2: a query no key may see (lse = -inf) gets P = 0, not NaN.
        sm.lse[st * kBlockM + lane + 32 * e] = in ? BwdLse2(p.lse[row_off + qi]) : INFINITY;
        sm.delta[st * kBlockM + lane + 32 * e] = in ? p.delta[row_off + qi] : 0.f;
        if (kind == 2) seg_smem[st * kBlockM + lane + 32 * e] = ids[e];
      }
      if (lane == 0) info_smem[st] = row * 4 + kind;  // row < q_len < 2^29 (row * 4: int32)
      if constexpr (kTmaFirst) {
        MbarArrive(&sm.q_full[st]);
      } else if (lane == 0) {
        MbarArriveExpectTx(&sm.q_full[st], 2 * Cfg::kQBytes);
        sm.LoadQdo(st, tm_q, tm_do, cta.h, row, cta.b);
      } else {
        MbarArrive(&sm.q_full[st]);
      }
      ++it;
    }
    __syncwarp();  // every lane's reads of vals[5]
    if (lane == 0) vals[5] = vals[5] + 32 * kBlockM;
    __syncwarp();
  }
  PublishEndSlot<kStages>(sm.q_empty, sm.q_full, info_smem, it, lane);
}

// kFusedOptSeg with kFusedOptQ80 (unordered only): the dQ writer, lane 0.
// Each staged step's slot holds its first accumulator row (-1 = done); the
// reduce-add is cut at q_len (a diagonal step may end past the accumulator's
// ceil(q_len / 80) * 80 rows).
template <class Cfg>
__device__ __forceinline__ void FusedSegWriterQ80(const BwdParams& p, const FusedBwdParams& fp, uint8_t* smem,
                                                  const BwdKeyBlock& cta, uint64_t* dq_full,
                                                  uint64_t* dq_empty, int lane) {
  constexpr int kD = Cfg::kD, kDqBufs = Cfg::kDqBufs, kBlockM = Cfg::kBlockM;
  if (lane != 0) return;
  float* accum = fp.dq_accum + static_cast<int64_t>(cta.bh) * fp.num_m * 64 * kD;
#pragma unroll 1
  for (int it = 0;; ++it) {
    const int bq = it % kDqBufs;
    MbarWait(&dq_full[bq], (it / kDqBufs) & 1);
    const int row = reinterpret_cast<const volatile int32_t*>(smem + Cfg::kOffDqInfo)[bq];
    if (row < 0) break;
    BulkReduceAddF32S2G(accum + static_cast<int64_t>(row) * kD,
                        SmemAddr(smem + Cfg::kOffDq) + bq * Cfg::kDqBytes,
                        static_cast<uint32_t>(min(kBlockM, p.q_len - row)) * (kD * 4));
    BulkCommitGroup();
    BulkWaitGroupRead<0>();
    MbarArrive(&dq_empty[bq]);
  }
  BulkWaitGroupAll();  // every reduce-add complete before the CTA exits
}

// kOrdered = false: dQ blocks are added in whatever order they come (bulk
// float32 reduce-adds into an accumulator zeroed beforehand), with no
// semaphores: reruns may differ in the last bits (deterministic=False).
template <int kD, bool kF16, int kStages_, int kDqBufs_, bool kOrdered = true, int kOpts = 0>
__global__ void __launch_bounds__(384, 1)
    AttnBwdFusedSm90Kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                           const __grid_constant__ CUtensorMap tm_v,
                           const __grid_constant__ CUtensorMap tm_do, const FusedBwdParams fp) {
  constexpr bool kWide = (kOpts & kFusedOptWideSteps) != 0;
  constexpr bool kQ80 = (kOpts & kFusedOptQ80) != 0;
  constexpr bool kQ80Diag = kQ80 && (kOpts & kFusedOptQ80Diag) != 0;
  constexpr bool kSeg = (kOpts & kFusedOptSeg) != 0;
  static_assert(!kQ80 || !kOrdered, "80-query steps: unordered dQ only");
  static_assert(!kSeg || !(kWide || (kOpts & kFusedOptDqFirst)),
                "segments: 64- or 80-query steps, default order");
  // FlashAttention-3's step order (dV after dS^T): wide and 80-query steps.
  constexpr bool kFa3Order = kWide || kQ80;
  using Cfg = FusedBwdConfig<kD, kStages_, kDqBufs_, kWide, kQ80, kSeg>;
  constexpr int kBlockN = Cfg::kBlockN, kBlockM = Cfg::kBlockM, kStages = Cfg::kStages;
  constexpr int kDqBufs = Cfg::kDqBufs;
  constexpr int kDBlocks = Cfg::kDBlocks;
  constexpr bool kSplitKeys = Cfg::kSplitKeys;
  constexpr bool kDqRot = (kOpts & kFusedOptDqRot) != 0;
  constexpr float kLog2e = 1.4426950408889634f;
  const BwdParams& p = fp.base;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  const DkDvSmem<Cfg> sm(smem);
  uint64_t* dq_full = sm.q_empty + kStages;
  uint64_t* dq_empty = dq_full + kDqBufs;

  // Ordered: blockIdx.y = key block (the semaphore order relies on it: see
  // the header). Unordered with fp.head_major: see FusedBwdParams.
  const bool head_major = !kOrdered && fp.head_major != 0;
  const int num_n = (p.kv_len + kBlockN - 1) / kBlockN;
  int grid_n = static_cast<int>(blockIdx.y), grid_bh = static_cast<int>(blockIdx.x);
  if (head_major) {
    const int x = static_cast<int>(blockIdx.x);
    const int group0 = x / (fp.head_group * num_n) * fp.head_group;  // the group's first (batch, head)
    const int group_size = min(fp.head_group, p.batch * p.heads - group0);
    const int r = x - group0 * num_n;
    grid_n = r / group_size;
    grid_bh = group0 + r % group_size;
  }
  const BwdKeyBlock cta =
      Q80DiagSteps<kQ80Diag, kBlockN, kBlockM>(p, BwdKeyBlockAt<kBlockN, kBlockM>(p, grid_n, grid_bh, [&] {
                                                 // fp.num_m counts 64-row blocks; wide steps are 128 rows;
                                                 // 80-query steps cover q_len (fp.num_m may count more rows).
                                                 if constexpr (kQ80) return (p.q_len + kBlockM - 1) / kBlockM;
                                                 return kWide ? (fp.num_m + 1) / 2 : fp.num_m;
                                               }));
  // The query block (step) of `it` (loader, dQ writer and consumers alike).
  const int m_rot = head_major && cta.m_count > 0 ? cta.n_block % cta.m_count : 0;
  auto m_of = [&](int it) {
    int r = it + m_rot;
    if (r >= cta.m_count) r -= cta.m_count;
    return cta.m_begin + r;
  };
  // The first query row of step m: m * kBlockM, or with kQ80Diag (causal)
  // from the key block's diagonal row.
  const int diag_row0 = kQ80Diag && p.causal ? cta.n_block * kBlockN : 0;
  auto row_of = [&](int m) {
    if constexpr (kQ80Diag) return diag_row0 + m * kBlockM;
    return m * kBlockM;
  };

  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);

  // q_full: every loader lane (lse/delta stores); lane 0 adds the tx.
  InitBwdPipeline<kStages>(sm.kv_full, sm.q_full, 32, sm.q_empty, &tm_q, &tm_k, &tm_v, &tm_do, [&] {
#pragma unroll
    for (int s = 0; s < kDqBufs; ++s) {
      MbarInit(&dq_full[s], kSplitKeys ? 128 : 256);  // every storing consumer thread
      MbarInit(&dq_empty[s], 1);                      // the writer lane
    }
  });

  if (warpgroup == 0) {
    SetMaxNRegDec<Cfg::kProducerRegs>();
    if (threadIdx.x < 32) {
      // ------------------------------ loader ------------------------------
      const int lane = threadIdx.x;
      if (lane == 0) {
        MbarArriveExpectTx(sm.kv_full, 2 * Cfg::kKBytes);
        TmaLoadHeadRows<kDBlocks, kBlockN>(sm.k, &tm_k, sm.kv_full, cta.hk, cta.n_block * kBlockN, cta.b);
        TmaLoadHeadRows<kDBlocks, kBlockN>(sm.v, &tm_v, sm.kv_full, cta.hk, cta.n_block * kBlockN, cta.b);
      }
      const float* lse_row = p.lse + (static_cast<int64_t>(cta.b) * p.heads + cta.h) * p.q_len;
      const float* delta_row = p.delta + (static_cast<int64_t>(cta.b) * p.heads + cta.h) * p.q_len;
      if constexpr (kSeg && kQ80) {
        FusedSegLoaderQ80<Cfg, (kOpts & kFusedOptTmaFirst) != 0>(p, fp, sm, smem, cta, row_of(cta.m_begin),
                                                                 &tm_q, &tm_do, lane);
      } else if constexpr (kSeg) {
        FusedSegLoader<Cfg, (kOpts & kFusedOptTmaFirst) != 0>(p, fp, sm, smem, cta, &tm_q, &tm_do, lane);
      }
      for (int it = 0; !kSeg && it < cta.m_count; ++it) {
        const int m = m_of(it);
        const int st = it % kStages;
        const uint32_t ph = (it / kStages) & 1;
        MbarWait(&sm.q_empty[st], ph ^ 1);
        if constexpr ((kOpts & kFusedOptTmaFirst) != 0) {
          // The transaction count first (no arrival), the copies, then every
          // lane's lse/delta stores and one arrival each (count 32 as before).
          if (lane == 0) {
            MbarExpectTx(&sm.q_full[st], 2 * Cfg::kQBytes);
            sm.LoadQdo(st, &tm_q, &tm_do, cta.h, row_of(m), cta.b);
          }
        }
#pragma unroll
        for (int e = 0; e < (kBlockM + 31) / 32; ++e) {
          if (kBlockM % 32 != 0 && lane + 32 * e >= kBlockM) break;  // 80-query steps: 2.5 rounds
          const int qi = row_of(m) + lane + 32 * e;
          const bool in = qi < p.q_len;
          sm.lse[st * kBlockM + lane + 32 * e] = in ? lse_row[qi] * kLog2e : INFINITY;
          sm.delta[st * kBlockM + lane + 32 * e] = in ? delta_row[qi] : 0.f;
        }
        if constexpr ((kOpts & kFusedOptTmaFirst) != 0) {
          MbarArrive(&sm.q_full[st]);
        } else if (lane == 0) {
          MbarArriveExpectTx(&sm.q_full[st], 2 * Cfg::kQBytes);
          sm.LoadQdo(st, &tm_q, &tm_do, cta.h, row_of(m), cta.b);
        } else {
          MbarArrive(&sm.q_full[st]);
        }
      }
    } else if (threadIdx.x == 32 || (kSeg && threadIdx.x < 64)) {
      // (kSeg: the whole warp; the dense writer is lane 32 alone.)
      // ----------------------------- dQ writer -----------------------------
      const uint32_t dq_smem = SmemAddr(smem + Cfg::kOffDq);
      if constexpr (kSeg && kQ80) {
        FusedSegWriterQ80<Cfg>(p, fp, smem, cta, dq_full, dq_empty, static_cast<int>(threadIdx.x) - 32);
      } else if constexpr (kSeg) {
        FusedSegWriter<Cfg, kOrdered>(p, fp, smem, cta, dq_full, dq_empty,
                                      static_cast<int>(threadIdx.x) - 32);
      } else if constexpr (kQ80) {
        // Unordered only: step m is accumulator rows 80m .. 80m + 79, one
        // contiguous reduce-add (rows past q_len add zeros inside fp.num_m * 64).
        float* accum = fp.dq_accum + static_cast<int64_t>(cta.bh) * fp.num_m * 64 * kD;
        for (int it = 0; it < cta.m_count; ++it) {
          const int bq = it % kDqBufs;
          MbarWait(&dq_full[bq], (it / kDqBufs) & 1);
          if constexpr (kQ80Diag) {
            // Cut at q_len (the step may end past the accumulator's rows).
            const int row = row_of(m_of(it));
            BulkReduceAddF32S2G(accum + static_cast<int64_t>(row) * kD, dq_smem + bq * Cfg::kDqBytes,
                                static_cast<uint32_t>(min(kBlockM, p.q_len - row)) * (kD * 4));
          } else {
            BulkReduceAddF32S2G(accum + static_cast<int64_t>(m_of(it)) * kBlockM * kD,
                                dq_smem + bq * Cfg::kDqBytes, Cfg::kDqBytes);
          }
          BulkCommitGroup();
          BulkWaitGroupRead<0>();
          MbarArrive(&dq_empty[bq]);
        }
        BulkWaitGroupAll();  // every reduce-add complete before the CTA exits
      } else if constexpr (kWide) {
        // Counters and accumulator in 64-row blocks (fp.num_m of them); step M
        // stages blocks 2M (buffer rows 0-63) and 2M + 1 (rows 64-127). Block
        // 2M + 1 >= num_m is past q_len (only padding rows, all-zero dQ): skipped.
        int* counters = fp.counters + static_cast<int64_t>(cta.bh) * fp.num_m;
        float* accum = fp.dq_accum + static_cast<int64_t>(cta.bh) * fp.num_m * 64 * kD;
        for (int it = 0; it < cta.m_count; ++it) {
          const int m = m_of(it);
          const int bq = it % kDqBufs;
          MbarWait(&dq_full[bq], (it / kDqBufs) & 1);
          const int nblk = 2 * m + 1 < fp.num_m ? 2 : 1;
          for (int hb = 0; hb < nblk; ++hb) {
            const int blk = 2 * m + hb;
            float* dst = accum + static_cast<int64_t>(blk) * 64 * kD;
            const uint32_t src = dq_smem + bq * Cfg::kDqBytes + hb * Cfg::kDqBlockBytes;
            if (!kOrdered) {
              BulkReduceAddF32S2G(dst, src, Cfg::kDqBlockBytes);
            } else if (cta.n_block == 0) {
              BulkStoreS2G(dst, src, Cfg::kDqBlockBytes);
            } else {
              // Key blocks 0 .. n-1 touch block blk before n does (prefix, see the header).
#if defined(JAXDNN_SM90_HANG_TRAP)
              long long spins = 0;
              while (LdAcquireGpu(counters + blk) != cta.n_block) {
                if (++spins > (1ll << 26)) __trap();
                __nanosleep(64);
              }
#else
              while (LdAcquireGpu(counters + blk) != cta.n_block) __nanosleep(32);
#endif
              FenceProxyAsyncGlobal();  // the acquire above before the async-proxy reduction
              BulkReduceAddF32S2G(dst, src, Cfg::kDqBlockBytes);
            }
          }
          BulkCommitGroup();
          BulkWaitGroupRead<0>();  // both copies have read the buffer
          MbarArrive(&dq_empty[bq]);
          if constexpr (kOrdered) {
            BulkWaitGroupAll();
            FenceProxyAsyncGlobal();  // the async-proxy writes before the generic release
            __threadfence();
            for (int hb = 0; hb < nblk; ++hb) StReleaseGpu(counters + 2 * m + hb, cta.n_block + 1);
          }
        }
        if constexpr (!kOrdered) BulkWaitGroupAll();  // every reduce-add complete before the CTA exits
      } else {
        int* counters = fp.counters + static_cast<int64_t>(cta.bh) * cta.num_m;
        float* accum = fp.dq_accum + static_cast<int64_t>(cta.bh) * cta.num_m * kBlockM * kD;
        for (int it = 0; it < cta.m_count; ++it) {
          const int m = m_of(it);
          const int bq = it % kDqBufs;
          MbarWait(&dq_full[bq], (it / kDqBufs) & 1);
          int* cnt = counters + m;
          float* dst = accum + static_cast<int64_t>(m) * kBlockM * kD;
          const uint32_t src = dq_smem + bq * Cfg::kDqBytes;
          if constexpr (!kOrdered) {
            // Any order: add, free the buffer once read; no semaphore.
            BulkReduceAddF32S2G(dst, src, Cfg::kDqBytes);
            BulkCommitGroup();
            BulkWaitGroupRead<0>();
            MbarArrive(&dq_empty[bq]);
            continue;
          }
          if (cta.n_block == 0) {
            BulkStoreS2G(dst, src, Cfg::kDqBytes);
          } else {
#if defined(JAXDNN_SM90_HANG_TRAP)
            long long spins = 0;
            while (LdAcquireGpu(cnt) != cta.n_block) {
              if (++spins > (1ll << 26)) __trap();
              __nanosleep(64);
            }
#else
            while (LdAcquireGpu(cnt) != cta.n_block) __nanosleep(32);
#endif
            FenceProxyAsyncGlobal();  // the acquire above before the async-proxy reduction
            BulkReduceAddF32S2G(dst, src, Cfg::kDqBytes);
          }
          BulkCommitGroup();
          BulkWaitGroupRead<0>();
          MbarArrive(&dq_empty[bq]);
          BulkWaitGroupAll();
          FenceProxyAsyncGlobal();  // the async-proxy writes before the generic release
          __threadfence();
          StReleaseGpu(cnt, cta.n_block + 1);
        }
        if constexpr (!kOrdered) BulkWaitGroupAll();  // every reduce-add complete before the CTA exits
      }
    }
  } else {
    // ------------------------------ consumers ------------------------------
    SetMaxNRegInc<Cfg::kConsumerRegs>();
    const int cw = warpgroup - 1;
    const int tid = threadIdx.x % 128;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int g = lane / 4;
    const int t = lane % 4;

    const uint32_t k_all = SmemAddr(sm.k);
    const uint32_t k_base = k_all + cw * 64 * 128;
    const uint32_t v_base = SmemAddr(sm.v) + cw * 64 * 128;
    const uint32_t q_base = SmemAddr(sm.q);
    const uint32_t do_base = SmemAddr(sm.dout);
    const uint32_t ds_smem = SmemAddr(smem + Cfg::kOffDs);
    const uint32_t dq_smem = SmemAddr(smem + Cfg::kOffDq);
    const float scale_log2 = p.scale_log2;
    const int key0 = cta.n_block * kBlockN + cw * 64 + warp * 16 + g;  // +8 for r = 1
    // This thread's rows of the dS tile (keys): cw*64 + warp*16 + g + 8r; row & 7 = g.
    const uint32_t ds_row_off = (cw * 64 + warp * 16 + g) * 128 + 4 * t;
    // kSeg: the current step (from the loader's info word), its kind, and
    // this thread's two key rows' segment ids (INT_MIN past kv_len: those
    // keys' dK/dV are not stored and their K rows are zero).
    // kQ80 (240 registers already in use): none of these held; the info word
    // re-read from its slot (valid until the step's release) and the key ids
    // loaded on mixed steps only (seg_info, seg_key_ids).
    int seg_m = 0, seg_kind = 0;
    int seg_kid[2] = {0, 0};
    if constexpr (kSeg && !kQ80) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int key = key0 + 8 * r;
        seg_kid[r] =
            key < p.kv_len ? __ldg(fp.kv_segments + static_cast<int64_t>(cta.b) * p.kv_len + key) : INT_MIN;
      }
    }

    float dv[kD / 2];
    float dk[kD / 2];
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) {
      dv[i] = 0.f;
      dk[i] = 0.f;
    }

    float s[kBlockM / 2];
    float dp[kBlockM / 2];
    uint32_t pa[kBlockM / 16][4];
    uint32_t dsa[kBlockM / 16][4];
    constexpr int kDqCols = Cfg::kDqCols;
    float dqa[kQ80 ? kBlockM / 2 : kDqCols / 2];  // kQ80: dQ^T, 64 head-dim rows x 80 queries

    auto gemm_s_dp = [&](int it) {
      const int st = it % kStages;
      const uint32_t qb = q_base + st * Cfg::kQBytes;
      const uint32_t dob = do_base + st * Cfg::kQBytes;
      WgmmaFence();
      TileGemmKMajor<kBlockM, kD, kF16, kBlockN, kBlockM>(s, k_base, qb);
      WgmmaCommit();
      TileGemmKMajor<kBlockM, kD, kF16, kBlockN, kBlockM>(dp, v_base, dob);
      WgmmaCommit();
    };
    auto seg_info = [&](int it) -> int {
      return reinterpret_cast<const volatile int32_t*>(smem + Cfg::kOffInfo)[it % kStages];
    };
    auto compute_p = [&](int it) {
      const int m = kSeg ? seg_m : m_of(it);
      const float* lse_s = sm.lse + (it % kStages) * kBlockM;
      if constexpr (kSeg && kQ80) {
        if ((seg_info(it) & 3) == 2) {
          int kid[2];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int key = key0 + 8 * r;
            kid[r] = key < p.kv_len ? __ldg(fp.kv_segments + static_cast<int64_t>(cta.b) * p.kv_len + key)
                                    : INT_MIN;
          }
          const int lo[2] = {0, 0}, hi[2] = {kBlockM, kBlockM};
          FwdMaskBlock<true>(s, 0, lo, hi, t,
                             reinterpret_cast<const int32_t*>(smem + Cfg::kOffSeg) + (it % kStages) * kBlockM,
                             kid);
        }
      } else if constexpr (kSeg) {
        // Mixed segments: -inf before the exp where the key's and query's ids
        // differ (P = 0, so dS = 0), as the two-kernel extended path.
        if (seg_kind == 2) {
          const int lo[2] = {0, 0}, hi[2] = {kBlockM, kBlockM};
          FwdMaskBlock<true>(s, 0, lo, hi, t,
                             reinterpret_cast<const int32_t*>(smem + Cfg::kOffSeg) + (it % kStages) * kBlockM,
                             seg_kid);
        }
      }
      ProbsTransposed<kBlockM, kF16>(s, lse_s, t, scale_log2);
      if constexpr (kSeg && kQ80) {
        const int row = seg_info(it) >> 2;  // the step's first row (FusedSegLoaderQ80)
        if (p.causal && row < (cta.n_block + 1) * kBlockN) MaskEarlierQueries<kBlockM>(s, row, t, key0);
      } else if (p.causal && row_of(m) < (cta.n_block + 1) * kBlockN) {
        MaskEarlierQueries<kBlockM>(s, row_of(m), t, key0);
      }
      // FA3 order: P^T stays float until dS^T is done (fewer live registers).
      if constexpr (!kFa3Order) PackFragments<kF16, kBlockM>(s, pa);
    };
    auto gemm_dv = [&](int it) {
      const uint32_t dob = do_base + (it % kStages) * Cfg::kQBytes;
      WgmmaFence();
      TileGemmRegsA<kD, kBlockM, kF16>(dv, pa, dob);
      WgmmaCommit();
    };
    // dS^T = P^T (dP^T - delta) -> dsa, and into this step's dS tile.
    auto compute_ds = [&](int it) {
      const float* delta_s = sm.delta + (it % kStages) * kBlockM;
      DsTransposed<kBlockM>(dp, s, delta_s, t);
      if constexpr (kFa3Order) PackFragments<kF16, kBlockM>(s, pa);
      const uint32_t ds_tile = ds_smem + (it & 1) * Cfg::kDsBytes + (kQ80 ? 0u : ds_row_off);
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk) {
        dsa[kk][0] = PackPair<kF16>(dp[8 * kk + 0], dp[8 * kk + 1]);
        dsa[kk][1] = PackPair<kF16>(dp[8 * kk + 2], dp[8 * kk + 3]);
        dsa[kk][2] = PackPair<kF16>(dp[8 * kk + 4], dp[8 * kk + 5]);
        dsa[kk][3] = PackPair<kF16>(dp[8 * kk + 6], dp[8 * kk + 7]);
        // dsa[kk][q]: key row g + 8(q & 1), query columns 8(2kk + (q >> 1)) + 2t, +1;
        // 16-byte chunk j = 2kk + (q >> 1) of the step: panel j >> 3 (64 queries
        // each; always 0 unless wide), chunk (j & 7) ^ (row & 7) = (j & 7) ^ g in it.
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int j = 2 * kk + (q >> 1);
          if constexpr (kQ80) {
            StShared32(ds_tile + Q80DsOffset(cw * 64 + warp * 16 + g + 8 * (q & 1), 8 * j + 2 * t),
                       dsa[kk][q]);
          } else {
            StShared32(ds_tile + (j >> 3) * Cfg::kDsPanelBytes + (q & 1) * 8 * 128 + (((j & 7) ^ g) << 4),
                       dsa[kk][q]);
          }
        }
      }
    };
    auto gemm_dk = [&](int it) {
      const uint32_t qb = q_base + (it % kStages) * Cfg::kQBytes;
      WgmmaFence();
      TileGemmRegsA<kD, kBlockM, kF16>(dk, dsa, qb);
      WgmmaCommit();
    };
    // dK over query slices [16 k0, 16 k1) of the step (kFusedOptDqFirst's halves).
    auto gemm_dk_slices = [&](int it, auto k0, auto k1) {
      const uint32_t qb = q_base + (it % kStages) * Cfg::kQBytes;
      WgmmaFence();
#pragma unroll
      for (int kk = decltype(k0)::value; kk < decltype(k1)::value; ++kk) {
        Wgmma<kD, kF16>::RS(dk, dsa[kk], MakeDescSw128(qb + kk * 16 * 128, kBlockM * 128, 1024), 1);
      }
      WgmmaCommit();
    };
    // dQ_m (64 queries x kDqCols columns) = dS . K, A = dS tile (MN-major), B = K (MN-major).
    auto gemm_dq = [&](int it) {
      const uint32_t ds_tile = ds_smem + (it & 1) * Cfg::kDsBytes;
      WgmmaFence();
      if constexpr (kSplitKeys) {
        // Own 64 keys, all kD head-dim columns (96: one and a half panels of
        // K, kBlockN * 128 bytes apart).
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const uint64_t da = MakeDescSw128(ds_tile + cw * 64 * 128 + kk * 2048, 64 * 128, 1024);
          const uint64_t db = MakeDescSw128(k_base + kk * 2048, kBlockN * 128, 1024);
          WgmmaSSTT<kDqCols, kF16>(dqa, da, db, kk > 0 ? 1 : 0);
        }
      } else if constexpr (kQ80) {
        // dQ^T for head-dim rows [64cw, 64cw + 64) (A = K panel cw, MN-major),
        // all 80 queries (B = dS^T, MN-major, 32-byte swizzle): 16 keys per k
        // step = 2048 bytes of K, two 256-byte dS^T atoms.
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
          const uint64_t da = MakeDescSw128(k_all + cw * kBlockN * 128 + kk * 2048, kBlockN * 128, 1024);
          const uint64_t db = MakeDescSw32(ds_tile + kk * 512, kQ80DsBlockBytes, 256);
          WgmmaSSTT80<kF16>(dqa, da, db, kk > 0 ? 1 : 0);
        }
      } else if constexpr (kWide) {
        // Queries [64cw, 64cw + 64) of the step (A = dS panel cw, MN-major,
        // both warpgroups' key rows), all 128 keys, all 64 columns (B = K's
        // single panel, MN-major); 16 keys = 16 rows = 2048 bytes per k step.
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
          const uint64_t da =
              MakeDescSw128(ds_tile + cw * Cfg::kDsPanelBytes + kk * 2048, Cfg::kDsPanelBytes, 1024);
          const uint64_t db = MakeDescSw128(k_all + kk * 2048, kBlockN * 128, 1024);
          WgmmaSSTT64<kF16>(dqa, da, db, kk > 0 ? 1 : 0);
        }
      } else {
        // All 128 keys, head-dim columns [64cw, 64cw + 64) (panel cw of K).
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
          const uint64_t da = MakeDescSw128(ds_tile + kk * 2048, kBlockN * 128, 1024);
          const uint64_t db = MakeDescSw128(k_all + cw * kBlockN * 128 + kk * 2048, kBlockN * 128, 1024);
          WgmmaSSTT64<kF16>(dqa, da, db, kk > 0 ? 1 : 0);
        }
      }
      WgmmaCommit();
    };
    // Byte offset of this thread's float2 (row warp*16 + g + 8r, column col0 + 8j + 2t)
    // in a [64][D] float32 buffer whose 16-byte chunks are XOR-swizzled by row & 7 (= g).
    // Wide: a [128][64] buffer, this warpgroup's queries at rows 64cw.. (= 64-row
    // accumulator block 2M + cw, same swizzle since 64cw + warp*16 + 8r = 0 mod 8).
    const int dq_key = kDqRot ? DqSwizzleKey(g) : g;  // rows g + 8r: row & 7 = g
    auto dq_off = [&](int j, int r) -> uint32_t {
      if constexpr (kWide) {
        const int chunk = 2 * j + (t >> 1);
        return (cw * 64 + warp * 16 + g + 8 * r) * (kD * 4) + ((chunk ^ dq_key) << 4) + (t & 1) * 8;
      } else {
        const int chunk = (kSplitKeys ? 0 : cw * 16) + 2 * j + (t >> 1);
        return (warp * 16 + g + 8 * r) * (kD * 4) + ((chunk ^ dq_key) << 4) + (t & 1) * 8;
      }
    };
    auto store_dq = [&](int it) {
      const int bq = it % kDqBufs;
      const uint32_t buf = dq_smem + bq * Cfg::kDqBytes;
      MbarWait(&dq_empty[bq], ((it / kDqBufs) & 1) ^ 1);
      if constexpr (kQ80) {
        // dqa[4j + 2r + e] = dQ^T[head dim 64cw + warp*16 + g + 8r][query 8j + 2t + e].
#pragma unroll
        for (int j = 0; j < kBlockM / 8; ++j) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              StShared32(buf + Q80DqOffset<kD>(8 * j + 2 * t + e, cw * 64 + warp * 16 + g + 8 * r),
                         __float_as_uint(dqa[4 * j + 2 * r + e]));
            }
          }
        }
        if constexpr (kSeg) {
          // The writer's slot: the step's first accumulator row (FusedSegWriterQ80).
          if (cw == 0 && tid == 0) {
            reinterpret_cast<volatile int32_t*>(smem + Cfg::kOffDqInfo)[bq] = seg_info(it) >> 2;
          }
        }
        FenceProxyAsyncShared();
        MbarArrive(&dq_full[bq]);
      } else if constexpr (kSplitKeys) {
        // Fixed-order sum of the two warpgroups' partials: warpgroup 1 stores,
        // warpgroup 0 adds its own and stores the sum.
        if (cw == 1) {
#pragma unroll
          for (int j = 0; j < kDqCols / 8; ++j) {
#pragma unroll
            for (int r = 0; r < 2; ++r)
              StShared64F(buf + dq_off(j, r), dqa[4 * j + 2 * r], dqa[4 * j + 2 * r + 1]);
          }
        }
        NamedBarrierSync(kFusedBarDqXchg, 256);
        if (cw == 0) {
#pragma unroll
          for (int j = 0; j < kDqCols / 8; ++j) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const uint32_t a = buf + dq_off(j, r);
              const float2 o = LdShared64F(a);
              StShared64F(a, o.x + dqa[4 * j + 2 * r], o.y + dqa[4 * j + 2 * r + 1]);
            }
          }
          if constexpr (kSeg) {
            if (tid == 0) reinterpret_cast<volatile int32_t*>(smem + Cfg::kOffDqInfo)[bq] = seg_m;
          }
          FenceProxyAsyncShared();
          MbarArrive(&dq_full[bq]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < kDqCols / 8; ++j) {
#pragma unroll
          for (int r = 0; r < 2; ++r)
            StShared64F(buf + dq_off(j, r), dqa[4 * j + 2 * r], dqa[4 * j + 2 * r + 1]);
        }
        if constexpr (kSeg) {
          if (cw == 0 && tid == 0) reinterpret_cast<volatile int32_t*>(smem + Cfg::kOffDqInfo)[bq] = seg_m;
        }
        FenceProxyAsyncShared();
        MbarArrive(&dq_full[bq]);
      }
    };
    auto release = [&](int it) {
      __syncwarp();
      if (lane == 0) MbarArrive(&sm.q_empty[it % kStages]);
    };
    auto wait_full = [&](int it) { MbarWait(&sm.q_full[it % kStages], (it / kStages) & 1); };

    MbarWait(sm.kv_full, 0);
    int seg_steps = 0;  // kSeg: the steps taken (the loader's terminator ends the loop)
    for (int it = 0; kSeg || it < cta.m_count; ++it) {
      wait_full(it);
      if constexpr (kSeg) {
        const int info = reinterpret_cast<const volatile int32_t*>(smem + Cfg::kOffInfo)[it % kStages];
        if (info < 0) {
          seg_steps = it;
          break;
        }
        if constexpr (!kQ80) {
          seg_m = info >> 2;
          seg_kind = info & 3;
        }
      }
      gemm_s_dp(it);
      WgmmaWait<1>();  // S^T
      FenceRegs(s);
      compute_p(it);
      if constexpr (!kFa3Order) gemm_dv(it);  // FA3 order: dV after dS^T (below)
      WgmmaWait<kFa3Order ? 0 : 1>();         // dP^T (dV may still run)
      FenceRegs(dp);
      compute_ds(it);
      auto ds_barrier = [&] {
        // The dS tile (generic-proxy stores) before the wgmma (async proxy) reads it.
        FenceProxyAsyncShared();
        if constexpr (kSplitKeys) {
          NamedBarrierSync(kFusedBarDsWg + cw, 128);
        } else {
          NamedBarrierSync(kFusedBarDs, 256);
        }
      };
      // The last wgmma group issued is (part of) dK: once everything before it
      // (dV, dQ) is done, stage dQ while it runs, then finish the step.
      auto stage_dq_under_dk = [&](int it) {
        WgmmaWait<1>();
        FenceRegs(dqa);
        store_dq(it);
        WgmmaWait<0>();
        FenceRegs(dv);
        FenceRegs(dk);
        release(it);
      };
      if constexpr (kFa3Order) {
        // FA3 order: P^T and dS^T finished before dV is issued, so only the
        // packed operands (pa, dsa) stay live next to dV, dK and dQ.
        gemm_dv(it);
        ds_barrier();
        gemm_dq(it);
        gemm_dk(it);
        stage_dq_under_dk(it);
      } else if constexpr ((kOpts & kFusedOptDqFirst) != 0) {
        using std::integral_constant;
        gemm_dk_slices(it, integral_constant<int, 0>{}, integral_constant<int, kBlockM / 32>{});
        ds_barrier();
        gemm_dq(it);
        gemm_dk_slices(it, integral_constant<int, kBlockM / 32>{}, integral_constant<int, kBlockM / 16>{});
        stage_dq_under_dk(it);
      } else {
        gemm_dk(it);
        ds_barrier();
        gemm_dq(it);
        WgmmaWait<0>();
        FenceRegs(dv);
        FenceRegs(dk);
        FenceRegs(dqa);
        release(it);
        store_dq(it);
      }
    }

    if constexpr (kSeg) {
      // The writer's terminator: the next dQ buffer's slot = -1, arrived on by
      // the threads that arrive on a staged step.
      const int bq = seg_steps % kDqBufs;
      MbarWait(&dq_empty[bq], ((seg_steps / kDqBufs) & 1) ^ 1);
      if (cw == 0 && tid == 0) reinterpret_cast<volatile int32_t*>(smem + Cfg::kOffDqInfo)[bq] = -1;
      if (!kSplitKeys || cw == 0) MbarArrive(&dq_full[bq]);
    }

    // ---------------------------- epilogue ----------------------------
    StoreDkDvRows<kD, kD, kF16>(p, dk, dv, cta.b, cta.h, cta.hk, key0, t, 0);
  }
}

// ---------------------------------------------------------------------------
// dq[b, i, h, :] = scale * dq_accum (un-swizzled), in the data type. One
// thread per 4 output elements (one 16-byte accumulator chunk).
// kRot: chunks keyed by DqSwizzleKey (kFusedOptDqRot).
template <int kD, bool kF16, bool kRot = false>
__global__ void __launch_bounds__(256) AttnBwdFusedDqConvertKernel(const FusedBwdParams fp) {
  const BwdParams& p = fp.base;
  const int64_t idx4 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total4 = static_cast<int64_t>(p.batch) * p.q_len * p.heads * kD / 4;
  if (idx4 >= total4) return;
  const int64_t e = idx4 * 4;
  const int c = static_cast<int>(e % kD) / 4;  // 16-byte chunk of the row
  const int64_t r = e / kD;                    // (b * q_len + i) * heads + h
  const int h = static_cast<int>(r % p.heads);
  const int64_t bi = r / p.heads;
  const int i = static_cast<int>(bi % p.q_len);
  const int b = static_cast<int>(bi / p.q_len);
  const int64_t row = (static_cast<int64_t>(b) * p.heads + h) * (static_cast<int64_t>(fp.num_m) * 64) + i;
  const int key = kRot ? DqSwizzleKey(i & 7) : (i & 7);
  const float4 v = *reinterpret_cast<const float4*>(fp.dq_accum + row * kD + ((c ^ key) << 2));
  const float sc = p.scale;
  uint2 o;
  o.x = PackPair<kF16>(v.x * sc, v.y * sc);
  o.y = PackPair<kF16>(v.z * sc, v.w * sc);
  *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p.dq) + e) = o;
}

// (min, max) of the segment ids ids[i0, i1) (INT_MAX, INT_MIN when empty).
__device__ __forceinline__ int2 SegIdRange(const int32_t* ids, int i0, int i1) {
  int mn = INT_MAX, mx = INT_MIN;
  for (int i = i0; i < i1; ++i) {
    const int v = __ldg(ids + i);
    mn = min(mn, v);
    mx = max(mx, v);
  }
  return make_int2(mn, mx);
}

// kFusedOptSeg: fp.q_seg_range[b, m] = (min, max) of query segment ids
// [64m, 64m + 64) and fp.kv_seg_range[b, n] of key ids [128n, 128n + 128)
// (within the lengths), one thread per step or key block, before the fused
// kernel.
__global__ void __launch_bounds__(256) AttnBwdFusedSegRangeKernel(const FusedBwdParams fp) {
  const BwdParams& p = fp.base;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nq = static_cast<int64_t>(p.batch) * fp.num_m;
  const int num_n = (p.kv_len + 127) / 128;
  if (idx >= nq + static_cast<int64_t>(p.batch) * num_n) return;
  const bool q = idx < nq;
  const int per = q ? fp.num_m : num_n, rows = q ? 64 : 128, len = q ? p.q_len : p.kv_len;
  const int64_t k = q ? idx : idx - nq;
  const int b = static_cast<int>(k / per), blk = static_cast<int>(k % per);
  const int32_t* ids = (q ? fp.q_segments : fp.kv_segments) + static_cast<int64_t>(b) * len;
  (q ? fp.q_seg_range : fp.kv_seg_range)[k] = SegIdRange(ids, blk * rows, min(blk * rows + rows, len));
}

// kFusedOptSeg with kFusedOptQ80: as AttnBwdFusedSegRangeKernel with query
// ranges of 80 rows every 16, fp.q_seg_range[b, g] = (min, max) of ids
// [16g, min(16g + 80, q_len)) (g < ceil(q_len / 16)): the exact range of an
// 80-query step starting at row 16g.
__global__ void __launch_bounds__(256) AttnBwdFusedSegRangeQ80Kernel(const FusedBwdParams fp) {
  const BwdParams& p = fp.base;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int groups = (p.q_len + kSegQ80GroupRows - 1) / kSegQ80GroupRows;
  const int64_t nq = static_cast<int64_t>(p.batch) * groups;
  const int num_n = (p.kv_len + 127) / 128;
  if (idx >= nq + static_cast<int64_t>(p.batch) * num_n) return;
  const bool q = idx < nq;
  const int per = q ? groups : num_n, stride = q ? kSegQ80GroupRows : 128, rows = q ? 80 : 128;
  const int len = q ? p.q_len : p.kv_len;
  const int64_t k = q ? idx : idx - nq;
  const int b = static_cast<int>(k / per), blk = static_cast<int>(k % per);
  const int32_t* ids = (q ? fp.q_segments : fp.kv_segments) + static_cast<int64_t>(b) * len;
  (q ? fp.q_seg_range : fp.kv_seg_range)[k] = SegIdRange(ids, blk * stride, min(blk * stride + rows, len));
}

}  // namespace jaxdnn::attention::sm90
