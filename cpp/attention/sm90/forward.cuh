// Hopper (sm_90a) attention forward in the FlashAttention-3 style, dense case:
// no bias/mask/lengths/segments/softcap/dropout/window; causal (top-left) only
// when q_len == kv_len. Head dim 64, 128 or 256 (96 and 192 on the layouts of
// 128 and 256: see FwdConfig), bf16 or f16.
//
// One CTA = one 128-row query tile of one (batch, head); 3 warpgroups:
//   warpgroup 0: producer. After setmaxnreg.dec one thread issues the TMA loads:
//     the Q tile once, then K and V blocks of 128 rows into a 2-stage ring
//     (full barriers: TMA transaction bytes; empty barriers: one arrival per
//     consumer warp). KV blocks go from the last one down, so the only block
//     that needs masking (causal diagonal / partial last block) comes first.
//   warpgroups 1, 2: consumers, 64 query rows each. S = Q K^T by wgmma (A = Q,
//     B = K, both K-major from shared memory; at head dim 128 A comes from
//     registers, loaded once per tile: see FwdQRegs), online softmax in registers
//     (exp2 with a log2e-prescaled scale), P packed to 16-bit in registers as
//     the A operand of O += P V (B = V MN-major from shared memory). The S gemm
//     of the next block is in flight while the P.V gemm of this one runs, and
//     the softmax of the next block overlaps the P.V gemm (intra-warpgroup
//     overlap). Optional (template flags): pingpong turns between the two
//     consumer warpgroups; persistent CTAs. Epilogue: normalize, stage O in a
//     swizzled shared-memory buffer, 16-byte coalesced stores; lse per row.
// Shared memory (D=128): Q 32 KB + 2 x (K 32 KB + V 32 KB) + O 32 KB ~ 193 KB.
// Head dim 256: kv blocks of 64 rows (S = 64 x 64 per warpgroup by m64n64k16
// over 16 k-steps, O += P V by m64n256k16 over 4), Q 64 KB + 2 x (K 32 KB +
// V 32 KB) = 192 KB, and no room for an O buffer: O is staged in Q's buffer
// (each consumer warpgroup over its own 64 Q rows), so there Q is released
// after the epilogue (see kOInQ). Causal: the top kBlockM / kBlockN = 2 kv
// blocks of a tile cross the diagonal and are masked.
// Head dim 256, 80-key blocks (template argument kBlockNOpt = 80 of FwdConfig
// and the kernel; dense static launches, causal ones one CTA per tile): S = 64 x 80 per
// warpgroup by m64n80k16, O += P V over 5 k-steps of 16, Q 64 KB + 2 x (K 40
// KB + V 40 KB) = 224 KB. Fewer, larger blocks: the per-block softmax,
// barrier and pipeline overheads are paid over 80 keys instead of 64. 80 does
// not divide the 128-row query tile, so a causal tile's diagonal crosses up to
// three blocks (kDiagBlocks), all masked; the extended and dynamic paths keep 64.
// Head dim 64, three consumer warpgroups (kConsumers = 3; the default for
// dense non-causal launches, and for dense causal ones from 2048 keys on the dynamic
// scheduler): 192-row query tiles, 512 threads, consumers at 160 registers. At head dim 64 the gemms are half
// as long per key as at 128 while the softmax is not; a third warpgroup gives the tensor cores another
// warpgroup's gemms to run while two are in their softmax (FA3's d64 tile).
// Extended path (template flag kExt; checked on an H200): padding
// lengths, causal with the bottom-right alignment when q_len < kv_len, a
// sliding window, softcap and segment ids (packed documents), with the rules of
// attention/mask.h (see attention/sm90/forward_mask.cuh). There the producer warp (all 32
// lanes) walks each tile's band of kv blocks [n_lo, n_hi) (from the lengths,
// causality and the window) from the top down, votes on the blocks' segment
// ids 32 blocks at a time (skip / one segment / mixed) from their precomputed
// (min, max) ranges (attention/sm90/segment_ranges.cuh, a small kernel the launcher
// runs first), and hands each loaded block's index and
// kind (and its key segment ids) to the consumers through a small shared-
// memory slot per ring stage, written before the K barrier's arrive. The
// tile's last block is flagged in its slot (the producer votes one chunk
// ahead where needed), so the consumers need no block count up front; a tile
// with no allowed key (rows past q_length, a window that misses everything)
// gets one terminator slot (no data) and just writes zeros and lse = -inf.
// The dense path (kExt = false) is the code it was before.
// Dynamic tile scheduler (template flag kDynamic, opt-in): for uneven tiles
// (causal, windows, packed documents) one CTA per tile pays a dead prologue
// and epilogue per short tile (1 CTA per SM: nothing overlaps them), and a
// static persistent stride balances them badly. With kDynamic, min(tiles,
// SMs) persistent CTAs take tiles greedily: the first is blockIdx.x, each next
// one gridDim.x + atomicAdd(tile_counter, 1) (a global int the launcher zeroes
// before the launch), claimed by the producer after it issues the current
// tile's last K/V load (p.claim_late, the default: greedier, 10% on packed
// documents) or right after its Q load (the atomic's latency hidden behind
// the K/V loads; a CTA holds one claimed tile ahead). The producer posts each
// tile index in its Q buffer's shared-memory slot before that buffer's
// arrive.expect_tx, and -1 with a plain arrive when no tile is left; the
// consumers wait on the Q barrier, then read the slot (arrive is release,
// try_wait acquire). A slot is rewritten only after its q_empty, which every
// consumer warp arrives on after reading it. Dense dynamic tiles below head
// dim 256 alternate between two Q buffers (see FwdQBufs).
// Tiles keep the decode() order (heaviest causal tile of a (batch, head)
// first), so the greedy claim is close to longest-first; an A/B order
// (p.lpt_chunk_bh) takes heads in L2-sized chunks, longest tile first across
// each chunk.
// Clusters of two (template argument kCluster = 2; the default for dense
// non-causal launches at head dim 128 with an even number of query tiles per
// (batch, head)): the two CTAs of a cluster walk neighbouring query tiles of
// one (batch, head) in lockstep; each producer loads half of every K/V block
// and multicasts it to both, and a stage is free once the consumer warps of
// both CTAs released it (remote mbarrier arrivals). K/V leave L2 once per
// pair: +1-5% at head dim 128, level at 256 (docs/perf/attention.md, Standing
// decisions: Clusters of two with K/V multicast).
// Not done: fp8, bias/mask/dropout.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "attention/sm90/forward_config.cuh"
#include "attention/sm90/forward_mask.cuh"
#include "attention/sm90/blocks.cuh"

namespace jaxdnn::attention::sm90 {

// kPingpong: the consumer warpgroups take turns issuing their gemms (named
// barriers 3 and 4; with three, 4 to 6 in a ring), so one's softmax overlaps
// another's gemms.
// kPersistent: gridDim.x CTAs walk the tiles with a stride of gridDim.x; the
// next tile's Q load overlaps this tile's last P.V gemm and epilogue.
// Tiles: t = ((b * heads + h) * num_m_blocks + m_rev), m_block = last - m_rev,
// so the query tiles of one (batch, head) are adjacent (they share K and V in
// L2), heaviest (causal) first.
// kExt: the extended path (lengths, bottom-right causal, window, softcap,
// segments); the dense instantiations (kExt = false) compile as before.
// kDynamic (with kPersistent): tiles claimed through p.tile_counter (see the
// header comment); off, every instantiation compiles as before.
// kBlockNOpt = 80 (head dim 256, dense static launches; the launcher ignores
// the request elsewhere): 80-key blocks; 0 compiles as before.
// kCluster = 2 (dense persistent launches: non-causal static, causal
// dynamic): CTAs in clusters of two, whose tiles are neighbouring query tiles
// of one (batch, head) in lockstep; each producer loads half of every K/V block and
// multicasts it to both CTAs, so K/V cross from L2 once per pair (see
// ClusterPairsFit in the launcher). 1 compiles as before.
// kBias (with kExt, one Q buffer): the additive bias of p.bias, staged per
// consumer warp (attention/sm90/forward_bias.cuh); false compiles as before.
template <int kD, bool kF16, bool kPingpong, bool kPersistent, bool kExt = false, bool kDynamic = false,
          int kBlockNOpt = 0, int kConsumers = 2, int kCluster = 1, bool kBias = false, int kDv = kD>
__global__ void __launch_bounds__(FwdConfig<kD, kBlockNOpt, kConsumers>::kThreads, 1)
    AttnFwdSm90Kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                      const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                      const FwdParams p) {
  constexpr int kQBufs = FwdQBufs<kD, kDynamic, kExt>();
  using Cfg = FwdConfig<kD, kBlockNOpt, kConsumers, kQBufs, kDv>;
  static_assert(kDv == kD || (!kExt && !kDynamic && kCluster == 1 && !kBias),
                "a value head dim of its own: the dense static kernels");
  static_assert(!Cfg::kNonCausalOnly || (!kExt && (!kDynamic || kConsumers == 3)),
                "80-key blocks: the dense static path only; 192-row tiles: the dense paths");
  constexpr bool kCausal = FwdCausalCompiled<kBlockNOpt, kConsumers, kPersistent, kDynamic>();
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kStages = Cfg::kStages;
  constexpr int kDBlocks = Cfg::kDBlocks;
  constexpr int kDvBlocks = Cfg::kDvBlocks;  // V's and O's panels
  // S = Q K^T with Q's fragments in registers (see JAXDNN_SM90_FWD_Q_REGS).
  constexpr bool kQRegs = FwdQRegs<kD, kBlockNOpt, kConsumers>();
  static_assert(!kBias || (kExt && kQBufs == 1 && kConsumers == 2 && kBlockN % 64 == 0),
                "bias: the extended path with one Q buffer, two consumers, 64- or 128-key blocks");
  static_assert(!kBias || Cfg::kSmemBytesBias <= 227 * 1024, "shared memory per CTA (bias)");

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  uint8_t* smem_q = smem + Cfg::kOffQ;
  uint8_t* smem_k = smem + Cfg::kOffK;
  uint8_t* smem_v = smem + Cfg::kOffV;
  uint8_t* smem_o = smem + Cfg::kOffO;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBar);
  uint64_t* q_full = bars;  // [kQBufs]
  uint64_t* q_empty = bars + kQBufs;
  uint64_t* k_full = bars + 2 * kQBufs;
  uint64_t* v_full = bars + 2 * kQBufs + kStages;
  uint64_t* k_empty = bars + 2 * kQBufs + 2 * kStages;
  uint64_t* v_empty = bars + 2 * kQBufs + 3 * kStages;
  // A CTA's local tile i uses Q buffer i % kQBufs, whose barriers are in phase
  // (i / kQBufs) & 1.
  auto q_buf = [](int local_tile) { return local_tile % kQBufs; };
  auto q_phase = [](int local_tile) { return static_cast<uint32_t>((local_tile / kQBufs) & 1); };
  // kDynamic: the tile index (-1: no more) per Q buffer, posted by the producer.
  volatile int32_t* tile_slot = reinterpret_cast<volatile int32_t*>(smem + Cfg::kOffTileSlot);
  static_assert(!kDynamic || kPersistent, "the dynamic scheduler runs persistent CTAs");
  constexpr bool kMulticast = kCluster == 2;
  static_assert(kCluster == 1 || (kMulticast && !kExt && kPersistent && Cfg::kBlockN % 16 == 0),
                "K/V multicast: dense persistent launches, kv blocks of whole 8-row swizzle atoms per half");
  // The half of each K/V block this CTA loads (and its peer the other).
  const uint32_t cta_rank = kMulticast ? ClusterCtaRank() : 0;
  // Probe builds (JAXDNN_SM90_FWD_CLUSTER_MODE): 0 = shared loads (default),
  // 1 = each CTA loads whole blocks but the stages stay coupled, 2 = the
  // cluster launch alone.
  constexpr bool kShareLoads = kMulticast && JAXDNN_SM90_FWD_CLUSTER_MODE == 0;
  constexpr bool kCoupled = kMulticast && JAXDNN_SM90_FWD_CLUSTER_MODE <= 1;
  // Causal pairs, the dynamic scheduler's clusters (the static ones run
  // non-causal only, the launcher's rule). Rank 0's producer claims pairs of
  // neighbouring query tiles and posts each pair index to rank 1's producer
  // through a two-slot ring in rank 1's shared memory (a remote store, then a
  // remote arrival on pair_full; rank 1 frees the slot with a remote arrival
  // on rank 0's pair_empty). The tile order applies to pairs; each producer
  // posts its own tile to its consumers as a plain (batch, head, query tile)
  // index, which they decode without the order. The pair's tiles differ in
  // length: the longer tile's top blocks (its diagonal, which the other tile
  // does not reach) are loaded by its CTA alone, while the other CTA passes
  // the same ring stages as dummies (completed with plain arrivals, released
  // as usual), so that every shared block sits at the same stage and phase
  // in both CTAs.
  constexpr bool kCausalPairs = kShareLoads && kCausal && kDynamic;
  static_assert(!kMulticast || !kDynamic || kCausalPairs, "dynamic clusters: causal pairs only");

  const int num_tiles = p.num_m_blocks * p.heads * p.batch;
  const int tile_stride = kPersistent ? static_cast<int>(gridDim.x) : num_tiles;
  const int kv_blocks = (p.kv_len + kBlockN - 1) / kBlockN;
  struct Tile {
    int m_block, h, b, n_blocks;
  };
  // Tile index -> (m_rev, batch * heads + head) in the scheduler's order,
  // over num_m query tiles (or tile pairs) per (batch, head).
  auto order = [&](int tile, int num_m, int& m_rev, int& bh) {
    m_rev = tile % num_m;
    bh = tile / num_m;
    if constexpr (kDynamic) {
      if (p.lpt_chunk_bh > 0) {
        // A/B order: (batch, head) pairs in chunks of lpt_chunk_bh whose K/V
        // fit in about half the L2; within a chunk the heaviest query tile of
        // every pair first, then the next heaviest (longest-first across the
        // chunk rather than per pair).
        const int base = tile / (p.lpt_chunk_bh * num_m) * p.lpt_chunk_bh;
        const int size = min(p.lpt_chunk_bh, p.heads * p.batch - base);
        const int t = tile - base * num_m;
        m_rev = t / size;
        bh = base + t % size;
      }
    }
  };
  auto decode = [&](int tile) {
    Tile r;
    int m_rev, bh;
    if constexpr (kCausalPairs) {
      m_rev = tile % p.num_m_blocks;  // posted in plain order (see kCausalPairs)
      bh = tile / p.num_m_blocks;
    } else {
      order(tile, p.num_m_blocks, m_rev, bh);
    }
    r.m_block = p.num_m_blocks - 1 - m_rev;
    r.h = bh % p.heads;
    r.b = bh / p.heads;
    if constexpr (!kCausal) {
      r.n_blocks = kv_blocks;  // never causal (the launcher's rule)
    } else if constexpr (kBlockN == kBlockM) {
      r.n_blocks = p.causal ? min(kv_blocks, r.m_block + 1) : kv_blocks;
    } else if constexpr (kBlockM % kBlockN == 0) {
      r.n_blocks = p.causal ? min(kv_blocks, (r.m_block + 1) * (kBlockM / kBlockN)) : kv_blocks;
    } else {
      r.n_blocks = p.causal ? min(kv_blocks, ((r.m_block + 1) * kBlockM + kBlockN - 1) / kBlockN) : kv_blocks;
    }
    return r;
  };

  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);

  if (threadIdx.x == 0) {
#pragma unroll
    for (int b = 0; b < kQBufs; ++b) {
      MbarInit(&q_full[b], 1);
      MbarInit(&q_empty[b], 4 * kConsumers);  // one arrival per consumer warp
    }
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      MbarInit(&k_full[s], 1);
      MbarInit(&v_full[s], 1);
      // Multicast: a stage is rewritten by both CTAs' loads, so both CTAs'
      // consumer warps release it.
      MbarInit(&k_empty[s], 4 * kConsumers * (kCoupled ? 2 : 1));
      MbarInit(&v_empty[s], 4 * kConsumers * (kCoupled ? 2 : 1));
    }
    if constexpr (kCausalPairs) {
      uint64_t* pair_bars = reinterpret_cast<uint64_t*>(smem + Cfg::kOffPairBars);
#pragma unroll
      for (int i = 0; i < 4; ++i) MbarInit(&pair_bars[i], 1);  // pair_full[2], pair_empty[2]
    }
    FenceMbarInit();
    PrefetchTmaDescriptor(&tm_q);
    PrefetchTmaDescriptor(&tm_k);
    PrefetchTmaDescriptor(&tm_v);
  }
  // Multicast: the peer's barriers are initialized before any load or arrival reaches them.
  if constexpr (kMulticast) {
    ClusterSync();
  } else {
    __syncthreads();
  }

  if (warpgroup == 0) {
    // ------------------------------ producer ------------------------------
    SetMaxNRegDec<kExt ? Cfg::kProducerRegsExt : Cfg::kProducerRegs>();
    if constexpr (kExt) {
      // One warp: lane 0 issues the barrier operations and TMA loads, all 32
      // lanes take part in the segment votes.
      if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        int32_t* info_smem = reinterpret_cast<int32_t*>(smem + Cfg::kOffInfo);
        int32_t* seg_smem = reinterpret_cast<int32_t*>(smem + Cfg::kOffSeg);
        // Segment ids come with their ranges (the launcher's rule).
        const bool has_seg = p.mask.q_segments != nullptr;
        int kv_it = 0;
        int local = 0;
        int claimed = 0;  // kDynamic, lane 0: the next tile, claimed while this one loads
        for (int tile = blockIdx.x; tile < num_tiles;
             tile = kDynamic ? __shfl_sync(0xffffffffu, claimed, 0) : tile + tile_stride, ++local) {
          const Tile tl = decode(tile);
          const int hk = tl.h / p.group;
          const int q0 = tl.m_block * kBlockM;
          const FwdRowGeom geo = FwdGeom(p.mask, tl.b, p.q_len, p.kv_len);
          int n_lo, n_hi;
          FwdTileBlocks<kBlockM, kBlockN>(p.mask, geo, p.causal, q0, n_lo, n_hi);
          int seg_min = 0, seg_max = 0;
          if (has_seg && n_hi > n_lo) {
            FwdQuerySegmentRangeOfTile(p.mask.q_seg_ranges + static_cast<int64_t>(tl.b) * p.mask.q_groups,
                                       tl.m_block, seg_min, seg_max);
          }
          const int32_t* kv_ids =
              has_seg ? p.mask.kv_segments + static_cast<int64_t>(tl.b) * p.kv_len : nullptr;
          const int2* kv_ranges =
              has_seg ? p.mask.kv_seg_ranges + static_cast<int64_t>(tl.b) * p.mask.kv_groups : nullptr;
          // The tile's first chunk of blocks is voted on before the Q load,
          // whose buffer (one Q buffer) frees only once the consumers' last S
          // gemm of the previous tile completes: the vote's loads overlap the
          // consumers' last blocks instead of delaying the first K load.
          unsigned may = 0u, same = 0u;  // the chunk's blocks to load / of one segment (bit k: n_top - k)
          int n_top = n_hi - 1;
          auto vote = [&](int top) {
            if (has_seg) {
              FwdVoteSegmentRanges<kBlockN>(kv_ranges, top, n_lo, seg_min, seg_max, lane, may, same);
            } else {
              const int count = min(32, top - n_lo + 1);  // no segments: every block, kind 1
              may = same = count == 32 ? 0xffffffffu : (1u << count) - 1u;
            }
          };
          // From chunk `top` down, the first chunk with a block to load (may = 0: none left).
          auto next_chunk = [&](int top) {
            may = 0u;
            for (n_top = top; n_top >= n_lo; n_top -= 32) {
              vote(n_top);
              if (may != 0u) break;
            }
          };
          next_chunk(n_hi - 1);
          const bool empty_tile = may == 0u;
          if (lane == 0) {
            const int qb = q_buf(local);
            MbarWait(&q_empty[qb], q_phase(local) ^ 1);
            if constexpr (kDynamic) tile_slot[qb] = tile;  // read by the consumers after q_full
            MbarArriveExpectTx(&q_full[qb], Cfg::kQBytes);
            TmaLoadHeadRows<kDBlocks, kBlockM>(smem_q + qb * Cfg::kQBytes, &tm_q, &q_full[qb], tl.h, q0,
                                               tl.b);
            if constexpr (kDynamic) {
              if (!p.claim_late) claimed = static_cast<int>(gridDim.x) + atomicAdd(p.tile_counter, 1);
            }
          }
          // Blocks from the top down. The tile's last block carries kFwdInfoLast
          // in its info word, so the consumers end the tile on it and the next
          // tile's first block takes the following ring stage at once (a
          // terminator slot would hold a stage through every tile boundary).
          while (may != 0u) {
            const int k = __ffs(may) - 1;
            may &= may - 1u;
            const int n = n_top - k;
            const int kind = ((same >> k) & 1u) ? 1 : 2;
            if (may == 0u) next_chunk(n_top - 32);  // whether a later block follows
            const int last = may == 0u ? kFwdInfoLast : 0;
            int ids[kBlockN / 32] = {};  // this lane's keys of the block
            if (kind == 2) FwdLoadSegments(kv_ids, n * kBlockN, p.kv_len, lane, ids);
            const int st = kv_it % kStages;
            const uint32_t ph = (kv_it / kStages) & 1;
            // The stage's slot is free once every consumer warp released its K
            // (they read the slot before that release).
            if (lane == 0) MbarWait(&k_empty[st], ph ^ 1);
            __syncwarp();
            if (kind == 2) FwdStoreSegments(ids, lane, seg_smem + st * kBlockN);
            if (lane == 0) info_smem[st] = n * kFwdInfoBlock + last + kind;
            __syncwarp();
            if (lane == 0) {
              MbarArriveExpectTx(&k_full[st], Cfg::kKVBytes);
              TmaLoadHeadRows<kDBlocks, kBlockN>(smem_k + st * Cfg::kKVBytes, &tm_k, &k_full[st], hk,
                                                 n * kBlockN, tl.b);
              MbarWait(&v_empty[st], ph ^ 1);
              MbarArriveExpectTx(&v_full[st], Cfg::kVBytes);
              TmaLoadHeadRows<kDvBlocks, kBlockN>(smem_v + st * Cfg::kVBytes, &tm_v, &v_full[st], hk,
                                                  n * kBlockN, tl.b);
            }
            ++kv_it;
          }
          // A tile with no block to load (no allowed key): one terminator slot
          // (info -1, no data), on which the consumers write zeros.
          if (empty_tile) {
            const int st = kv_it % kStages;
            const uint32_t ph = (kv_it / kStages) & 1;
            if (lane == 0) {
              MbarWait(&k_empty[st], ph ^ 1);
              info_smem[st] = -1;
              MbarArrive(&k_full[st]);
              MbarWait(&v_empty[st], ph ^ 1);
              MbarArrive(&v_full[st]);
            }
            ++kv_it;
          }
          if constexpr (kDynamic) {
            if (lane == 0 && p.claim_late)
              claimed = static_cast<int>(gridDim.x) + atomicAdd(p.tile_counter, 1);
          }
          __syncwarp();
        }
        if constexpr (kDynamic) {
          // No tile left: post -1 (once the consumers have read the last
          // tile's index, i.e. released its Q), completing q_full's phase
          // with a plain arrive (no transaction bytes).
          if (lane == 0) {
            const int qb = q_buf(local);
            MbarWait(&q_empty[qb], q_phase(local) ^ 1);
            tile_slot[qb] = -1;
            MbarArrive(&q_full[qb]);
          }
        }
      }
    } else if (threadIdx.x == 0) {
      int kv_it = 0;  // kv blocks loaded so far (ring position)
      int local = 0;  // tiles done by this CTA
      // kDynamic: the next tile, claimed while this one loads; pairs: rank 0
      // claims the next pair (after every cluster's first, blockIdx.x / 2).
      int claimed = 0;
      // kCausalPairs: this CTA's tile of the pair rank 0 claimed (-1: none
      // left), exchanged through rank 1's slot ring before the tile's loads.
      auto pair_tile = [&](int local_tile, int pair) -> int {
        int32_t* pair_slot = reinterpret_cast<int32_t*>(smem + Cfg::kOffPairSlot);
        uint64_t* pair_full = reinterpret_cast<uint64_t*>(smem + Cfg::kOffPairBars);
        uint64_t* pair_empty = pair_full + 2;
        const int ps = local_tile & 1;
        const uint32_t pph = static_cast<uint32_t>((local_tile >> 1) & 1);
        if (cta_rank == 0) {
          pair = pair < num_tiles / 2 ? pair : -1;
          MbarWait(&pair_empty[ps], pph ^ 1);
          StoreSharedRemote(&pair_slot[ps], 1, pair);
          MbarArriveClusterRelease(&pair_full[ps], 1);
        } else {
          MbarWaitAcquireCluster(&pair_full[ps], pph);
          pair = *reinterpret_cast<volatile int32_t*>(&pair_slot[ps]);
          MbarArriveClusterRelease(&pair_empty[ps], 0);
        }
        if (pair < 0) return -1;
        int m_rev_pair, bh;
        order(pair, p.num_m_blocks / 2, m_rev_pair, bh);
        return bh * p.num_m_blocks + 2 * m_rev_pair + static_cast<int>(cta_rank);
      };
      for (int tile = kCausalPairs ? pair_tile(0, static_cast<int>(blockIdx.x) / 2)
                                   : static_cast<int>(blockIdx.x);
           kCausalPairs ? tile >= 0 : tile < num_tiles; tile = kCausalPairs ? pair_tile(local + 1, claimed)
                                                               : kDynamic   ? claimed
                                                                            : tile + tile_stride,
               ++local) {
        const Tile tl = decode(tile);
        const int hk = tl.h / p.group;
        const int qb = q_buf(local);
        MbarWait(&q_empty[qb], q_phase(local) ^ 1);
        if constexpr (kDynamic) tile_slot[qb] = tile;  // read by the consumers after q_full
        MbarArriveExpectTx(&q_full[qb], Cfg::kQBytes);
        TmaLoadHeadRows<kDBlocks, kBlockM>(smem_q + qb * Cfg::kQBytes, &tm_q, &q_full[qb], tl.h,
                                           tl.m_block * kBlockM, tl.b);
        if constexpr (kDynamic) {
          if (!p.claim_late && (!kCausalPairs || cta_rank == 0)) {
            claimed = static_cast<int>(gridDim.x) / (kCausalPairs ? 2 : 1) + atomicAdd(p.tile_counter, 1);
          }
        }
        int lead = 0;  // kCausalPairs: this CTA's own top blocks
        if constexpr (kCausalPairs) {
          const int peer_blocks = decode(tile ^ 1).n_blocks;
          lead = max(0, tl.n_blocks - peer_blocks);
          for (int d = tl.n_blocks; d < peer_blocks; ++d, ++kv_it) {  // the peer's own top blocks
            const int st = kv_it % kStages;
            const uint32_t ph = (kv_it / kStages) & 1;
            MbarWait(&k_empty[st], ph ^ 1);
            MbarArrive(&k_full[st]);
            MbarWait(&v_empty[st], ph ^ 1);
            MbarArrive(&v_full[st]);
          }
        }
        for (int it = 0; it < tl.n_blocks; ++it, ++kv_it) {
          const int n = tl.n_blocks - 1 - it;
          const int st = kv_it % kStages;
          const uint32_t ph = (kv_it / kStages) & 1;
          MbarWait(&k_empty[st], ph ^ 1);
          MbarArriveExpectTx(&k_full[st], Cfg::kKVBytes);  // both halves land here
          if (kCausalPairs && it < lead) {
            // Both halves, into this CTA only.
            constexpr int kHalf = kBlockN / 2;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              TmaLoadHeadRowsMulticast<kDBlocks, kHalf, kBlockN>(
                  smem_k + st * Cfg::kKVBytes + half * kHalf * 128, &tm_k, &k_full[st], hk,
                  n * kBlockN + half * kHalf, tl.b, static_cast<uint16_t>(1u << cta_rank));
            }
            MbarWait(&v_empty[st], ph ^ 1);
            MbarArriveExpectTx(&v_full[st], Cfg::kVBytes);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              TmaLoadHeadRowsMulticast<kDvBlocks, kHalf, kBlockN>(
                  smem_v + st * Cfg::kVBytes + half * kHalf * 128, &tm_v, &v_full[st], hk,
                  n * kBlockN + half * kHalf, tl.b, static_cast<uint16_t>(1u << cta_rank));
            }
          } else if constexpr (kShareLoads) {
            constexpr int kHalf = kBlockN / 2;
            const int off = static_cast<int>(cta_rank) * kHalf;
            TmaLoadHeadRowsMulticast<kDBlocks, kHalf, kBlockN>(smem_k + st * Cfg::kKVBytes + off * 128, &tm_k,
                                                               &k_full[st], hk, n * kBlockN + off, tl.b, 0x3);
            MbarWait(&v_empty[st], ph ^ 1);
            MbarArriveExpectTx(&v_full[st], Cfg::kVBytes);
            TmaLoadHeadRowsMulticast<kDvBlocks, kHalf, kBlockN>(
                smem_v + st * Cfg::kVBytes + off * 128, &tm_v, &v_full[st], hk, n * kBlockN + off, tl.b, 0x3);
          } else {
            TmaLoadHeadRows<kDBlocks, kBlockN>(smem_k + st * Cfg::kKVBytes, &tm_k, &k_full[st], hk,
                                               n * kBlockN, tl.b);
            MbarWait(&v_empty[st], ph ^ 1);
            MbarArriveExpectTx(&v_full[st], Cfg::kVBytes);
            TmaLoadHeadRows<kDvBlocks, kBlockN>(smem_v + st * Cfg::kVBytes, &tm_v, &v_full[st], hk,
                                                n * kBlockN, tl.b);
          }
        }
        if constexpr (kDynamic) {
          if (p.claim_late && (!kCausalPairs || cta_rank == 0)) {
            claimed = static_cast<int>(gridDim.x) / (kCausalPairs ? 2 : 1) + atomicAdd(p.tile_counter, 1);
          }
        }
      }
      if constexpr (kDynamic) {
        // No tile left: -1 once the buffer's last tile index was read (see the ext path).
        const int qb = q_buf(local);
        MbarWait(&q_empty[qb], q_phase(local) ^ 1);
        tile_slot[qb] = -1;
        MbarArrive(&q_full[qb]);
      }
    }
  } else {
    // ------------------------------ consumers ------------------------------
    SetMaxNRegInc<kExt ? Cfg::kConsumerRegsExt : Cfg::kConsumerRegs>();
    const int cw = warpgroup - 1;
    const int tid = threadIdx.x % 128;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int g = lane / 4;
    const int t = lane % 4;

    uint32_t q_base = SmemAddr(smem_q) + cw * 64 * 128;  // this tile's Q buffer, set per tile
    const uint32_t k_base = SmemAddr(smem_k);
    const uint32_t v_base = SmemAddr(smem_v);
    const float scale_log2 = p.scale_log2;

    float o[kDv / 2];
    float s[kBlockN / 2];
    uint32_t pa[kBlockN / 16][4];
    uint32_t qa[kQRegs ? kD / 16 : 1][4];  // kQRegs: this tile's Q fragments
    float row_max[2], row_sum[2], corr[2];
    // Head dim 64: the row maximum over four partial maxima. There the gemms
    // are half as long per key as at 128 while the softmax is not, so its
    // chain shows: +1-4% at d64, level at d128 (docs/perf/log.md, attention v28).
    constexpr bool kSplitMax = kD == 64;
    bool rescale = true;  // warp-uniform: this block moved the warp's maxima
    const float rescale_threshold = p.rescale_threshold;

    auto gemm_s = [&](int st) {
      const uint32_t kb = k_base + st * Cfg::kKVBytes;
      WgmmaFence();
      if constexpr (kQRegs) {
        TileGemmRegsAKMajor<kD, kF16, kBlockN>(s, qa, kb);
      } else {
        TileGemmKMajor<kBlockN, kD, kF16, kBlockM, kBlockN>(s, q_base, kb);
      }
      WgmmaCommit();
    };
    auto gemm_o = [&](int st) {
      const uint32_t vb = v_base + st * Cfg::kVBytes;
      WgmmaFence();
      TileGemmRegsA<kDv, kBlockN, kF16>(o, pa, vb);
      WgmmaCommit();
    };
    auto release = [&](uint64_t* bar) {
      if (lane == 0) MbarArrive(bar);
    };
    // A K/V stage: with multicast, released in both CTAs (both load into it).
    auto release_kv = [&](uint64_t* bar) {
      if constexpr (kCoupled) {
        if (lane == 0) {
          MbarArriveCluster(bar, 0);
          MbarArriveCluster(bar, 1);
        }
      } else {
        release(bar);
      }
    };
    // Q's buffer may take the next tile's Q once every S gemm of this tile is
    // complete; when O is staged there (kOInQ) only after the epilogue, below.
    int qb = 0;  // this tile's Q buffer
    auto release_q_after_gemms = [&]() {
      if constexpr (!Cfg::kOInQ && !kQRegs) release(&q_empty[qb]);
    };
    // kQRegs: the tile's Q, once its barrier completed, into registers; the
    // buffer is released after the tile's first S gemm (which read them).
    auto load_q = [&]() {
      if constexpr (kQRegs) LoadFragmentsKMajor<kD, kBlockM>(qa, q_base, warp, lane);
    };
    auto release_q_after_first_gemm = [&]() {
      if constexpr (kQRegs) release(&q_empty[qb]);
    };
    // Online softmax of s in place (s becomes P, unnormalized); corr = factor
    // for the previous O and row sums. With lazy rescaling (see FwdParams) the
    // warp keeps its maxima unless one grew past the threshold: then corr = 1
    // and rescale_o is skipped (the final O / sum and lse use the same maxima).
    auto softmax = [&]() {
      float mx[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float m = row_max[r];
        if constexpr (kSplitMax) {
          // Four partial maxima: the exps wait on this chain, kBlockN / 32 + 2
          // deep instead of kBlockN / 8.
          float mp[4] = {m, -INFINITY, -INFINITY, -INFINITY};
#pragma unroll
          for (int j = 0; j < kBlockN / 8; ++j) {
            mp[j % 4] = fmaxf(mp[j % 4], fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
          }
          m = fmaxf(fmaxf(mp[0], mp[1]), fmaxf(mp[2], mp[3]));
        } else {
#pragma unroll
          for (int j = 0; j < kBlockN / 8; ++j) {
            m = fmaxf(m, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
          }
        }
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        mx[r] = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      }
      // -inf to finite compares as +inf (grows); -inf to -inf as NaN (does not).
      const bool grows = (mx[0] - row_max[0]) * scale_log2 > rescale_threshold ||
                         (mx[1] - row_max[1]) * scale_log2 > rescale_threshold;
      rescale = __any_sync(0xffffffffu, grows);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_new = rescale ? mx[r] : row_max[r];
        // kBias: scores in natural units (the bias added to scale * q.k,
        // scale_log2 = log2 e) and the row maximum subtracted before the
        // scaling, so that a row of equal huge logits (a bias of the dtype's
        // lowest value) gets P = 1 exactly, as the reference, not the
        // rounding residue of an fma at 1e38 (inf or 0).
        const float m_sub = m_new == -INFINITY ? 0.f : m_new;
        const float m_scaled = kBias ? m_sub : m_sub * scale_log2;
        corr[r] = !rescale ? 1.f
                  : kBias  ? exp2f((row_max[r] - m_sub) * scale_log2)
                           : exp2f(row_max[r] * scale_log2 - m_scaled);
        row_max[r] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float v = kBias ? exp2f((s[4 * j + 2 * r + e] - m_scaled) * scale_log2)
                                  : exp2f(fmaf(s[4 * j + 2 * r + e], scale_log2, -m_scaled));
            s[4 * j + 2 * r + e] = v;
            sum += v;
          }
        }
        row_sum[r] = row_sum[r] * corr[r] + sum;
      }
    };
    auto rescale_o = [&]() {
      if (!rescale) return;
#pragma unroll
      for (int j = 0; j < kDv / 8; ++j) {
        o[4 * j + 0] *= corr[0];
        o[4 * j + 1] *= corr[0];
        o[4 * j + 2] *= corr[1];
        o[4 * j + 3] *= corr[1];
      }
    };
    auto convert_p = [&]() { PackFragments<kF16, kBlockN>(s, pa); };

    // Named barriers: 1 + cw for the epilogue, kSchedBar + cw for the turns.
    constexpr int kSchedBar = 1 + kConsumers;
    auto sched_sync = [&]() {
      if constexpr (kPingpong) NamedBarrierSync(kSchedBar + cw, 256);
    };
    auto sched_arrive = [&]() {
      // (1 - cw for two: the instructions measured before three existed.)
      if constexpr (kPingpong)
        NamedBarrierArrive(kSchedBar + (kConsumers == 2 ? 1 - cw : (cw + 1) % kConsumers), 256);
    };
    if constexpr (kPingpong) {
      // Turns go round the consumers; consumer 0 goes first.
      if (cw == kConsumers - 1) NamedBarrierArrive(kSchedBar + 0, 256);
    }

    // kDynamic: the tile comes from the producer's slot once Q's barrier
    // completes (the same phase the tile's body waits on); -1 ends the loop.
    auto posted_tile = [&](int local_tile) -> int {
      MbarWait(&q_full[q_buf(local_tile)], q_phase(local_tile));
      return tile_slot[q_buf(local_tile)];
    };
    int kv_it = 0;
    int local = 0;
    for (int tile = kDynamic ? posted_tile(0) : static_cast<int>(blockIdx.x);
         kDynamic ? tile >= 0 : tile < num_tiles;
         tile = kDynamic ? posted_tile(local + 1) : tile + tile_stride, ++local) {
      const Tile tl = decode(tile);
      if constexpr (kQBufs > 1) {
        qb = q_buf(local);
        q_base = SmemAddr(smem_q) + qb * Cfg::kQBytes + cw * 64 * 128;
      }
      const int row0 = tl.m_block * kBlockM + cw * 64 + warp * 16 + g;  // +8 for r = 1
#pragma unroll
      for (int i = 0; i < kDv / 2; ++i) o[i] = 0.f;
      row_max[0] = row_max[1] = -INFINITY;
      row_sum[0] = row_sum[1] = 0.f;

      if constexpr (kExt) {
        const int32_t* info_smem = reinterpret_cast<const int32_t*>(smem + Cfg::kOffInfo);
        const int32_t* seg_smem = reinterpret_cast<const int32_t*>(smem + Cfg::kOffSeg);
        // This thread's rows: allowed keys [lo, hi) and query segment ids; the
        // warpgroup's range of keys that all its 64 rows see (no mask needed).
        const FwdRowGeom geo = FwdGeom(p.mask, tl.b, p.q_len, p.kv_len);
        int lo[2], hi[2], qid[2] = {0, 0};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          FwdRowKeys(p.mask, geo, p.causal, row0 + 8 * r, lo[r], hi[r]);
          if (p.mask.q_segments != nullptr && row0 + 8 * r < geo.q_valid) {
            qid[r] = __ldg(p.mask.q_segments + static_cast<int64_t>(tl.b) * p.q_len + row0 + 8 * r);
          }
        }
        int full_lo = 0x7fffffff, full_hi = 0;
        {
          const int w0 = tl.m_block * kBlockM + cw * 64;
          if (w0 + 63 < geo.q_valid) {
            int unused0, unused1;
            FwdRowKeys(p.mask, geo, p.causal, w0 + 63, full_lo, unused0);
            FwdRowKeys(p.mask, geo, p.causal, w0, unused1, full_hi);
          }
        }
        // Bias: this warp's stage, and the block whose copy is in flight
        // there (-1: none). Blocks come from the top down, so the next one is
        // predicted to be the one below; a miss (a skipped segment block)
        // copies the right one and waits for it.
        using BiasStage = FwdBiasStage<kBlockN>;
        const uint32_t bias_stage = SmemAddr(smem + Cfg::kOffBias) + (cw * 4 + warp) * BiasStage::kBytes;
        const uint8_t* bias_rows = nullptr;
        int bias_rows_valid = 0, bias_pending = -1, bias_first = 0;
        if constexpr (kBias) {
          const int w_row0 = tl.m_block * kBlockM + cw * 64 + warp * 16;
          bias_rows_valid = max(0, min(16, p.q_len - w_row0));
          bias_rows = static_cast<const uint8_t*>(p.bias.data) +
                      2 * (tl.b * p.bias.stride_b + tl.h * p.bias.stride_h +
                           static_cast<long long>(bias_rows_valid > 0 ? w_row0 : 0) * p.bias.stride_t);
          int n_lo, n_hi;
          FwdTileBlocks<kBlockM, kBlockN>(p.mask, geo, p.causal, tl.m_block * kBlockM, n_lo, n_hi);
          bias_first = n_lo;
          if (n_hi > n_lo) {
            bias_pending = n_hi - 1;
            BiasStage::Issue(p.bias, bias_stage, bias_rows, bias_rows_valid, p.kv_len, bias_pending * kBlockN,
                             lane);
          }
        }
        auto add_bias = [&](int n) {
          if (bias_pending != n) {
            CpAsyncWaitAll();  // a stale copy must not land over the right one
            __syncwarp();
            BiasStage::Issue(p.bias, bias_stage, bias_rows, bias_rows_valid, p.kv_len, n * kBlockN, lane);
          }
          BiasStage::Add(s, p.bias, bias_stage, g, t);
          bias_pending = n - 1 >= bias_first ? n - 1 : -1;
          if (bias_pending >= 0) {
            BiasStage::Issue(p.bias, bias_stage, bias_rows, bias_rows_valid, p.kv_len, bias_pending * kBlockN,
                             lane);
          }
        };
        // Softcap, bias, then the mask where the block needs one (the info
        // word: see kFwdInfoLast; kind 1: no segment test, 2: mixed segments).
        auto mask_block = [&](int info, int st) {
          const int n0 = (info / kFwdInfoBlock) * kBlockN;
          if (p.mask.softcap > 0.f) FwdSoftcap(s, p.mask.softcap, p.mask.softcap_scale);
          if constexpr (kBias) add_bias(info / kFwdInfoBlock);
          if ((info & 3) == 2) {
            FwdMaskBlock<true>(s, n0, lo, hi, t, seg_smem + st * kBlockN, qid);
          } else if (!(n0 >= full_lo && n0 + kBlockN <= full_hi)) {
            FwdMaskBlock<false>(s, n0, lo, hi, t, seg_smem, qid);
          }
        };
        // The slot (info, segment ids) of a stage is read before its K release.
        auto release_k = [&](int st) {
          __syncwarp();
          release(&k_empty[st]);
        };

        if constexpr (!kDynamic)
          MbarWait(q_full, local & 1);  // kDynamic: waited in posted_tile (kQBufs 1 here)
        load_q();
        int prev = kv_it;
        int st = prev % kStages;
        MbarWait(&k_full[st], (prev / kStages) & 1);
        int info = info_smem[st];
        if (info >= 0) {
          sched_sync();
          gemm_s(st);
          sched_arrive();
          WgmmaWait<0>();
          FenceRegs(s);
          release_q_after_first_gemm();
          mask_block(info, st);
          release_k(st);
          softmax();
          convert_p();
          while ((info & kFwdInfoLast) == 0) {
            const int cur = prev + 1;
            st = cur % kStages;
            const uint32_t ph = (cur / kStages) & 1;
            MbarWait(&k_full[st], ph);
            info = info_smem[st];
            const int pst = prev % kStages;
            const uint32_t pph = (prev / kStages) & 1;
            sched_sync();
            gemm_s(st);
            MbarWait(&v_full[pst], pph);
            gemm_o(pst);
            sched_arrive();
            WgmmaWait<1>();
            FenceRegs(s);
            mask_block(info, st);
            release_k(st);
            softmax();
            WgmmaWait<0>();
            FenceRegs(o);
            release(&v_empty[pst]);
            rescale_o();
            convert_p();
            prev = cur;
          }
          release_q_after_gemms();  // every S gemm of this tile is complete
          {
            const int lst = prev % kStages;
            MbarWait(&v_full[lst], (prev / kStages) & 1);
            sched_sync();
            gemm_o(lst);
            sched_arrive();
            WgmmaWait<0>();
            FenceRegs(o);
            release(&v_empty[lst]);
          }
        } else {
          // A tile with no block: its terminator slot (no gemm; zeros and lse = -inf).
          if constexpr (!Cfg::kOInQ) release(&q_empty[qb]);
          release_k(st);
          MbarWait(&v_full[st], (prev / kStages) & 1);
          release(&v_empty[st]);
        }
        // A predicted bias copy nobody read (a skipped last block) lands
        // before the next tile's copy starts or the CTA exits.
        if constexpr (kBias) CpAsyncWaitAll();
        kv_it = prev + 1;
      } else {
        const int n_blocks = tl.n_blocks;
        // 80-key blocks and static 192-row tiles: causal is compiled out (the
        // launcher never asks for it).
        const bool causal = kCausal && p.causal;
        // First block (the highest kv block): the only one that may need a mask.
        if constexpr (!kDynamic)
          MbarWait(q_full, local & 1);  // kDynamic: waited in posted_tile (kQBufs 1 here)
        load_q();
        if constexpr (kCausalPairs) {
          // The peer's own top blocks: dummy stages, released in both CTAs.
          for (int d = n_blocks, peer_blocks = decode(tile ^ 1).n_blocks; d < peer_blocks; ++d, ++kv_it) {
            const int st = kv_it % kStages;
            const uint32_t ph = (kv_it / kStages) & 1;
            MbarWait(&k_full[st], ph);
            release_kv(&k_empty[st]);
            MbarWait(&v_full[st], ph);
            release_kv(&v_empty[st]);
          }
        }
        {
          const int st = kv_it % kStages;
          MbarWait(&k_full[st], (kv_it / kStages) & 1);
          sched_sync();
          gemm_s(st);
          sched_arrive();
          WgmmaWait<0>();
          FenceRegs(s);
          release_q_after_first_gemm();
          release_kv(&k_empty[st]);
        }
        // Keys past kv_len, and (causal) keys past the row, to -inf in block n.
        auto mask_keys = [&](int n) {
#pragma unroll
          for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int col = n * kBlockN + 8 * j + 2 * t + e;
                const int row = row0 + 8 * r;
                if (col >= p.kv_len || (causal && col > row)) s[4 * j + 2 * r + e] = -INFINITY;
              }
            }
          }
        };
        {
          const int n = n_blocks - 1;
          if (causal || (n + 1) * kBlockN > p.kv_len) mask_keys(n);
        }
        softmax();
        convert_p();

        for (int it = 1; it < n_blocks; ++it) {
          const int cur = kv_it + it, prev = kv_it + it - 1;
          const int st = cur % kStages;
          const uint32_t ph = (cur / kStages) & 1;
          const int pst = prev % kStages;
          const uint32_t pph = (prev / kStages) & 1;
          MbarWait(&k_full[st], ph);
          sched_sync();
          gemm_s(st);
          MbarWait(&v_full[pst], pph);
          gemm_o(pst);
          sched_arrive();
          WgmmaWait<1>();
          FenceRegs(s);
          release_kv(&k_empty[st]);
          if constexpr (kBlockN < kBlockM) {
            // Causal: the tile's diagonal crosses its top kDiagBlocks blocks.
            if (causal && it < Cfg::kDiagBlocks) mask_keys(n_blocks - 1 - it);
          }
          softmax();
          WgmmaWait<0>();
          FenceRegs(o);
          release_kv(&v_empty[pst]);
          rescale_o();
          convert_p();
        }
        release_q_after_gemms();  // every S gemm of this tile is complete
        {
          const int last = kv_it + n_blocks - 1;
          const int lst = last % kStages;
          MbarWait(&v_full[lst], (last / kStages) & 1);
          sched_sync();
          gemm_o(lst);
          sched_arrive();
          WgmmaWait<0>();
          FenceRegs(o);
          release_kv(&v_empty[lst]);
        }
        kv_it += n_blocks;
      }

      // ---------------------------- epilogue ----------------------------
      float inv[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float sum = row_sum[r];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const bool empty = sum == 0.f;  // a NaN sum (NaN or inf logits) gives NaN, as the reference
        inv[r] = empty ? 0.f : 1.f / sum;
        const int row = row0 + 8 * r;
        if (t == 0 && row < p.q_len) {
          p.lse[(static_cast<int64_t>(tl.b) * p.heads + tl.h) * p.q_len + row] =
              empty                    ? -INFINITY
              : row_max[r] == INFINITY ? INFINITY  // an inf logit: +inf as the reference (sum is NaN)
              : kBias                  ? row_max[r] + __log2f(sum) * 0.69314718055994531f  // natural units
                                       : (row_max[r] * scale_log2 + __log2f(sum)) * 0.69314718055994531f;
        }
      }
      // Stage O (16-bit) in this warpgroup's 64 rows of the O buffer, with the
      // 128-byte swizzle (conflict-free), then TMA stores (kTmaStoreO) or
      // 16-byte coalesced stores by every thread.
      uint8_t* o_smem = smem_o + cw * 64 * 128;
      constexpr bool kTmaStoreO = Cfg::kTmaStoreO;
      if constexpr (kTmaStoreO) {
        if (tid == 0) BulkWaitGroupRead<0>();  // the previous tile's TMA store has read the staging
      }
      NamedBarrierSync(1 + cw, 128);  // the previous tile's reads are done
#pragma unroll
      for (int j = 0; j < kDv / 8; ++j) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = warp * 16 + g + 8 * r;
          const int off = (j / 8) * kBlockM * 128 + row * 128 + (((j % 8) ^ (row % 8)) * 16) + 4 * t;
          *reinterpret_cast<uint32_t*>(o_smem + off) =
              PackPair<kF16>(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r]);
        }
      }
      if constexpr (kTmaStoreO) {
        FenceProxyAsyncShared();  // this thread's staging writes, seen by the TMA (async proxy)
        NamedBarrierSync(1 + cw, 128);
        if (tid == 0) {
#pragma unroll
          for (int panel = 0; panel < kDvBlocks; ++panel) {
            TmaStore4d(&tm_o, o_smem + panel * kBlockM * 128, panel * 64, tl.h,
                       tl.m_block * kBlockM + cw * 64, tl.b);
          }
          BulkCommitGroup();
        }
        continue;
      }
      NamedBarrierSync(1 + cw, 128);
      constexpr int kChunksPerRow = kDv / 8;
      uint16_t* out = static_cast<uint16_t*>(p.out);
#pragma unroll
      for (int i = 0; i < 64 * kChunksPerRow / 128; ++i) {
        const int idx = i * 128 + tid;
        const int row = idx / kChunksPerRow;
        const int cc = idx % kChunksPerRow;
        const int off = (cc / 8) * kBlockM * 128 + row * 128 + (((cc % 8) ^ (row % 8)) * 16);
        const uint4 v = *reinterpret_cast<const uint4*>(o_smem + off);
        const int grow = tl.m_block * kBlockM + cw * 64 + row;
        if (grow < p.q_len) {
          *reinterpret_cast<uint4*>(
              out + ((static_cast<int64_t>(tl.b) * p.q_len + grow) * p.heads + tl.h) * kDv + cc * 8) = v;
        }
      }
      if constexpr (Cfg::kOInQ) {
        // The staging sat in this warpgroup's Q rows: only now may the next
        // tile's Q land there (persistent CTAs). The simplest correct order:
        // the producer's next Q load waits for the epilogue (at head dim 256
        // a tile's kv loop is long, so the lost overlap is small). The fence
        // orders these generic-proxy reads before that TMA (async-proxy) write.
        FenceProxyAsyncShared();
        __syncwarp();
        release(&q_empty[qb]);
      }
    }
    if constexpr (kPingpong) {
      if (cw == 0) NamedBarrierSync(kSchedBar + 0, 256);  // consume the last consumer's last arrival
    }
    if constexpr (Cfg::kTmaStoreO) {
      if (tid == 0) BulkWaitGroupAll();  // the last TMA stores of O
    }
  }
  // Multicast: no CTA leaves while its peer may still arrive on its barriers.
  if constexpr (kMulticast) ClusterSync();
}

}  // namespace jaxdnn::attention::sm90
