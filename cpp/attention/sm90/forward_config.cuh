// The sm_90a attention forward's parameters and compile-time configuration:
// FwdParams (what a launch passes), FwdConfig (tile sizes, shared-memory
// layout, register split per head dim and variant), FwdQBufs (query tile
// buffers) and FwdCausalCompiled (which kernels have causal masking). The
// kernel (attention/sm90/forward.cuh) and its launcher
// (attention/sm90/forward.cu) both read them.
#pragma once

#include <cstdint>

#include "attention/sm90/forward_bias.cuh"
#include "attention/sm90/forward_mask.cuh"

namespace jaxdnn::attention::sm90 {

struct FwdParams {
  int batch, q_len, kv_len, heads, kv_heads, group;
  int num_m_blocks;
  int causal;
  float scale_log2;  // softmax scale * log2(e)
  // Lazy rescaling (log2 units): a warp keeps its rows' running maxima, and
  // skips rescaling O, until some row's block maximum exceeds its running
  // maximum by more than this (P then reaches at most 2^threshold before the
  // final normalization, harmless in float32 and 16-bit P). Negative: rescale
  // on every block (the classic online softmax).
  float rescale_threshold;
  void* out;           // [batch, q_len, heads, head_dim]
  float* lse;          // [batch, heads, q_len]
  FwdMaskParams mask;  // the extended path's features (kExt); unused by the dense path
  FwdBiasParams bias;  // the extended path's additive bias (kBias); unused otherwise
  int* tile_counter;   // kDynamic: zeroed global claim counter; unused otherwise
  int lpt_chunk_bh;    // kDynamic: > 0 takes the L2-chunked longest-first order (see decode)
  int claim_late;      // kDynamic: 1 claims the next tile after this one's last K/V load
                       // (more greedy), 0 right after its Q load (the atomic's latency hidden)
};

// The epilogue's O stores: 1 = one TMA store per 64-column panel of each
// warpgroup's staged rows (issued by one thread, so the warpgroup goes on to
// its next tile), 0 = 16-byte stores by every thread (A/B builds). Head dim
// 128 causal +2.5% at seq 2048, +1% above; the three-warpgroup (192-row)
// kernels lost 1-3% and keep the thread stores, as does head dim 256 (O
// staged in Q's buffer): FwdConfig::kTmaStoreO (docs/perf/attention.md,
// Standing decisions: O by TMA stores).
#ifndef JAXDNN_SM90_FWD_TMA_STORE
#define JAXDNN_SM90_FWD_TMA_STORE 1
#endif

// kBlockNOpt: 0 = the head dim's default kv block; 80 = 80-key blocks at head
// dims 192 and 256 (dense static launches, see the header comment).
// kConsumers: consumer warpgroups of 64 query rows each; 3 (192-row tiles) at
// head dim 64, dense launches only (see the header comment).
// kQBufs: query tile buffers, 1 or 2 (the dynamic scheduler, see FwdQBufs).
// kDv: value's head dim (O's columns), kD unless MLA: 128 under a 192-column
// query/key, 64 under 128 (the V ring and the P.V gemm at value's own panels).
template <int kD, int kBlockNOpt = 0, int kConsumers = 2, int kQBufs = 1, int kDv = kD>
struct FwdConfig {
  // Head dims 96 and 192 take the layout of the next 64-column panel count
  // (96: two panels, the second half zero-filled by TMA and never read; 192:
  // three) and the tile rules of 128 and 256, with the gemms over their own
  // columns only (S over kD / 16 k-steps, O += P V at N = kD).
  static_assert(kD == 64 || kD == 96 || kD == 128 || kD == 192 || kD == 256,
                "head dim 64, 96, 128, 192 or 256");
  static_assert(kBlockNOpt == 0 || (kD > 128 && kBlockNOpt == 80),
                "80-key blocks at head dims 192 and 256 only");
  static_assert(kConsumers == 2 || (kConsumers == 3 && kD == 64 && kBlockNOpt == 0),
                "three consumer warpgroups at head dim 64 only");
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kBlockM = 64 * kConsumers;  // consumer warpgroups x 64 rows
  // Head dim 256: 64-row kv blocks, so that Q and a 2-stage K/V ring fit in
  // shared memory (and S, 32 registers, fits beside the 128 of O).
  static constexpr int kBlockN = kBlockNOpt != 0 ? kBlockNOpt : kD > 128 ? 64 : 128;
  // 80-key blocks and 192-row tiles have causal masking compiled in only
  // where FwdCausalCompiled says (the persistent 80-key and static 192-row
  // kernels are non-causal only).
  static constexpr bool kNonCausalOnly = kBlockNOpt != 0 || kConsumers != 2;
  // Kv blocks a query tile's causal diagonal crosses (the masked ones), the
  // most over every tile index: kBlockM / kBlockN where that divides (2 for
  // 128 / 64 at head dim 256); 2 for 192 / 128 (a tile starts on a block or
  // half way through one); 3 for 128 / 80 (tile 1's rows 128-255 cross the
  // blocks of keys 80-159, 160-239 and 240-319).
  static constexpr int kDiagBlocks = kBlockM % kBlockN == 0             ? kBlockM / kBlockN
                                     : kBlockM == 192 && kBlockN == 128 ? 2
                                     : kBlockM == 128 && kBlockN == 80  ? 3
                                                                        : -1;
  static_assert(kDiagBlocks > 0, "kDiagBlocks known for this tile");
  static constexpr int kStages = 2;
  static constexpr int kDBlocks = (kD + 63) / 64;  // 128-byte column blocks (panels)
  static constexpr int kQBytes = kBlockM * kDBlocks * 128;
  static constexpr int kKVBytes = kBlockN * kDBlocks * 128;  // a K stage (and V's when kDv == kD)
  static_assert(kDv == kD || (kD == 192 && kDv == 128) || (kD == 128 && kDv == 64),
                "value head dim: the query's, or 128 under 192, or 64 under 128");
  static constexpr int kDvBlocks = (kDv + 63) / 64;
  static constexpr int kVBytes = kBlockN * kDvBlocks * 128;  // a V stage
  // O is staged for the epilogue in its own buffer, or (head dim 256: no room
  // for one) in Q's, which then must stay unloaded until the staging is read.
  static constexpr bool kOInQ = kD > 128;
  // O leaves the staging by TMA stores (see JAXDNN_SM90_FWD_TMA_STORE).
  static constexpr bool kTmaStoreO = !kOInQ && kConsumers == 2 && JAXDNN_SM90_FWD_TMA_STORE != 0;
  static constexpr int kOffQ = 0;
  static_assert(kQBufs == 1 || (kQBufs == 2 && kD <= 128), "two Q buffers up to head dim 128");
  static constexpr int kOffK = kOffQ + kQBufs * kQBytes;
  static constexpr int kOffV = kOffK + kStages * kKVBytes;
  static constexpr int kOffO = kOInQ ? kOffQ : kOffV + kStages * kVBytes;  // epilogue staging
  static constexpr int kOffBar = kOInQ ? kOffV + kStages * kVBytes : kOffO + kQBytes;
  static constexpr int kNumBars = 2 * kQBufs + 4 * kStages;
  static constexpr int kSmemBytes = kOffBar + kNumBars * 8 + 1024;  // + alignment slack
  // Dynamic scheduler: the slot (one per Q buffer) where the producer posts a tile index.
  static constexpr int kOffTileSlot = kOffBar + kNumBars * 8;
  // Extended path: per ring stage, the block's info word and its kBlockN key segment ids.
  static constexpr int kOffInfo = kQBufs == 1 ? kOffBar + 96 : kOffTileSlot + 16;
  static constexpr int kOffSeg = kOffInfo + 32;
  static_assert(kStages * 4 <= 32, "ext smem slots");
  static constexpr int kSmemBytesExt = kOffSeg + kStages * kBlockN * 4 + 1024;
  // Bias (kBias, one Q buffer): each consumer warp's bias stage after the ext slots.
  static constexpr int kOffBias = (kOffSeg + kStages * kBlockN * 4 + 127) / 128 * 128;
  static constexpr int kSmemBytesBias = kOffBias + 4 * kConsumers * FwdBiasStage<kBlockN>::kBytes + 1024;
  static_assert(kOffTileSlot + 4 * kQBufs <= kOffInfo, "tile slots below the ext slots");
  static constexpr int kSmemBytesDynamic = kOffTileSlot + 16 + 1024;
  // Dynamic causal pairs: rank 1's two pair-index slots, then
  // pair_full[2] and pair_empty[2] (see the kernel's kCausalPairs).
  static constexpr int kOffPairSlot = kOffTileSlot + 16;
  static constexpr int kOffPairBars = kOffPairSlot + 8;
  static constexpr int kSmemBytesDynamicPairs = kOffPairBars + 4 * 8 + 1024;
  static constexpr int kProducerRegs = 24;
  // Three consumer warpgroups: 512 threads launch at 128 registers; 24 + 3 x
  // 160 fits (O 32, S 64 and P 32 registers per thread at head dim 64).
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : 240;
  // Extended path: its producer warp (segment votes of 32 blocks at once,
  // band limits) needs more than 24 registers (ptxas spilled at 24 and, for
  // head dim 64, at 32); the consumers fit in 232 without spills. setmaxnreg moves registers within the 168 x
  // 384 of the launch: producer + 2 x consumer must stay within 3 x 168. Head dim 256 (64-key blocks): the
  // producer spilled at 40 and the consumers fit in 224 without spills, so the split there is 56 / 224.
  static constexpr int kProducerRegsExt = kD > 128 ? 56 : 40;
  static constexpr int kConsumerRegsExt = kD > 128 ? 224 : 232;
  // setmaxnreg moves registers within the launch's (a multiple of 8 per thread).
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(kProducerRegs + kConsumers * kConsumerRegs <= (1 + kConsumers) * kLaunchRegs,
                "register split");
  static_assert(kProducerRegsExt + 2 * kConsumerRegsExt <= 3 * 168, "register split (ext)");
  static_assert(kSmemBytesExt <= 227 * 1024, "shared memory per CTA");
  // 80-key blocks at head dim 256: 224 KB of tiles + barriers = 230480 bytes.
  static_assert(kSmemBytes <= 227 * 1024 && kSmemBytesDynamic <= 227 * 1024, "shared memory per CTA");
  // TMA boxes and the 128-byte swizzle: every K/V panel (kBlockN rows of 128
  // bytes) starts on a 1024-byte swizzle atom (80 rows = 10 atoms).
  static_assert(kBlockN % 8 == 0 && kKVBytes % 1024 == 0 && kVBytes % 1024 == 0,
                "kv panels of whole 8-row swizzle atoms");
  static_assert(kNonCausalOnly || kBlockM % kBlockN == 0, "a query tile's diagonal spans whole kv blocks");
};

// Query tile buffers. The dynamic scheduler's tiles are often short (causal
// seq <= 2048), so a tile's Q load is paid every few key blocks: with two
// buffers the producer loads the next tile's Q as soon as it has claimed it
// (right after this tile's last K/V load), not once the consumers are done
// with this tile's Q, so the load hides behind the tile's last blocks and
// epilogue: head dim 64 causal +4-13%, head dim 128 causal +0.5-1%
// (docs/perf/attention.md, Standing decisions: Two Q buffers on dynamic
// kernels). The extended path takes its own count (below); head dim
// 256 has no room (and stages O in Q's buffer), and the static schedules keep
// one. -DJAXDNN_SM90_FWD_DYNAMIC_Q_BUFS=1 builds the one-buffer kernels for A/Bs.
#ifndef JAXDNN_SM90_FWD_DYNAMIC_Q_BUFS
#define JAXDNN_SM90_FWD_DYNAMIC_Q_BUFS 2
#endif
// The extended path's count on the dynamic scheduler (A/B builds:
// -DJAXDNN_SM90_FWD_EXT_Q_BUFS=1). Two lost 1.6-2.4% there while each tile
// had a terminator slot; with the last-block flag and the segment ranges they
// run level to +2.5% (docs/perf/attention.md, Standing decisions: Two Q
// buffers on dynamic kernels).
#ifndef JAXDNN_SM90_FWD_EXT_Q_BUFS
#define JAXDNN_SM90_FWD_EXT_Q_BUFS 2
#endif
template <int kD, bool kDynamic, bool kExt>
constexpr int FwdQBufs() {
  return !kDynamic || kD > 128 ? 1 : kExt ? JAXDNN_SM90_FWD_EXT_Q_BUFS : JAXDNN_SM90_FWD_DYNAMIC_Q_BUFS;
}

// S = Q K^T with the warpgroup's Q rows in registers (ldmatrix once per
// tile, then RS wgmmas), not read from shared memory by every S gemm: a third
// less shared-memory operand traffic in the S gemm (the kernels run
// power-limited), and Q's buffer is free after the tile's first block.
// 0: off; 1: head dim 128; 2: also head dim 64 (two consumer warpgroups,
// 128-key blocks only: 32 / 16 more registers, no new spills). Head dim 128
// +1-3%, head dim 64 level, so the default is 1 (docs/perf/attention.md,
// Standing decisions: Q in registers for the d128 S gemm).
#ifndef JAXDNN_SM90_FWD_Q_REGS
#define JAXDNN_SM90_FWD_Q_REGS 1
#endif
template <int kD, int kBlockNOpt, int kConsumers>
constexpr bool FwdQRegs() {
  return kBlockNOpt == 0 && kConsumers == 2 &&
         (((kD == 128 || kD == 96) && JAXDNN_SM90_FWD_Q_REGS >= 1) ||
          (kD == 64 && JAXDNN_SM90_FWD_Q_REGS >= 2));
}

// Clusters of two (the kernel's kCluster): what the pair shares, for probe
// builds (see the kernel). 0: each CTA loads half of every K/V block for both.
#ifndef JAXDNN_SM90_FWD_CLUSTER_MODE
#define JAXDNN_SM90_FWD_CLUSTER_MODE 0
#endif

// Whether a kernel has causal masking compiled in: every two-warpgroup config
// with the head dim's own key blocks; 192-row tiles on the dynamic scheduler;
// 80-key blocks (head dim 256) when not persistent (the causal launches: one
// CTA per tile), so the persistent non-causal 80-key kernels stay as measured.
template <int kBlockNOpt, int kConsumers, bool kPersistent, bool kDynamic>
constexpr bool FwdCausalCompiled() {
  return (kBlockNOpt == 0 && kConsumers == 2) || (kConsumers == 3 && kDynamic) ||
         (kBlockNOpt == 80 && !kPersistent);
}

}  // namespace jaxdnn::attention::sm90
