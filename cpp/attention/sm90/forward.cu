// Host launcher of the Hopper attention forward (see attention/sm90/forward.cuh).
#include "attention/sm90/forward.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "attention/sm90/forward.cuh"
#include "attention/sm90/mask_params.h"
#include "attention/sm90/segment_ranges.cuh"
#include "attention/sm90/blocks.cuh"
#include "common/cuda_device.h"
#include "common/switches.h"

namespace jaxdnn::attention {

namespace {

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

// Whether the workspace holds the segment ranges after the claim counter.
bool SegmentRangesFit(const AttnFwdArgs& a) {
  return a.workspace != nullptr &&
         a.workspace_elems >=
             kSm90TileCounterElems + sm90::SegmentRangeInts(a.shape.batch, a.shape.q_len, a.shape.kv_len);
}

// The extended cases (lengths, bottom-right causal, window, softcap, segment
// ids) are on by default since their self-test and the jax check passed on an
// H200 (docs/perf/attention.md, Standing decisions: sm_90a TMA/wgmma kernel
// for everything it can take); JAXDNN_ATTENTION_SM90_EXT=0 sends them back to
// the mma.sync kernel (for A/B timing).
bool ExtEnabled() { return SwitchOn(Switch::kAttentionSm90Ext); }

// An additive bias on the extended path (staged per consumer warp, see
// attention/sm90/forward_bias.cuh); JAXDNN_ATTENTION_SM90_BIAS=0 keeps it on
// the mma.sync kernel (for A/B timing).
bool BiasEnabled() { return SwitchOn(Switch::kAttentionSm90Bias); }

// The dynamic tile scheduler for uneven tiles (causal, window, segment ids).
// It needs the FFI workspace (its first element is the claim counter);
// jaxdnn/attention/primitives.py sizes one for every uneven case.
// JAXDNN_ATTENTION_SM90_DYNAMIC (read once): unset = by problem
// (DefaultDynamicBits), 0 = never, 1 = every uneven case in tile order, lpt =
// every uneven case in the L2-chunked longest-first order.
// Returns -1 (by problem), 0 (off), 8 (on) or 8 + 16 (on, chunked order):
// variant bits.
int DynamicVariantBits() {
  const std::string& v = SwitchText(Switch::kAttentionSm90Dynamic);
  return v == "0" ? 0 : v == "1" ? kFwdDynamic : v == "lpt" ? kFwdDynamic | kFwdLptOrder : -1;
}

// Where the dynamic scheduler (chunked order) wins: short tiles, whose dead
// prologue/epilogue it overlaps with the neighbouring tile (packed documents
// 1.13-1.15x); it lost on long causal tiles and at head dim 256, which keep
// one CTA per tile. With two Q buffers causal tiles gain up to 8192 keys
// (+4.5-5.5% at head dim 128), and dense head dim 128 causal calls over more
// keys take the plain tile order, each (batch, head)'s heaviest tile first,
// heads in turn (docs/perf/attention.md, Standing decisions: Dynamic
// scheduler for short uneven tiles only; Causal d128 on it up to 8192 keys;
// L2-chunked order).
// Returns the variant bits: 0 (one CTA per tile), 8 (dynamic, tile order) or
// 8 + 16 (dynamic, chunked longest-first order).
constexpr int64_t kDynamicCausalMaxKeys = 8192;
bool NeedsExt(const AttnFwdArgs& a);
int DefaultDynamicBits(const AttnFwdArgs& p) {
  const AttnMaskParams& m = p.mask_params;
  if (p.shape.head_dim > 128) return 0;  // 192 and 256: one CTA per tile
  if (m.q_segments != nullptr || m.window_left >= 0 || m.window_right >= 0) return kFwdDynamic | kFwdLptOrder;
  if (!m.causal) return 0;
  if (p.shape.kv_len <= kDynamicCausalMaxKeys) return kFwdDynamic | kFwdLptOrder;
  return p.shape.head_dim == 128 && !NeedsExt(p) ? 8 : 0;
}

// The dynamic scheduler claims a CTA's next tile after the current tile's
// last K/V load, not right after its Q load: closer to greedy list scheduling
// (a CTA busy with a long tile holds no reservation), the atomic's latency
// less hidden: packed documents forward 566 -> 515 us (docs/perf/attention.md,
// Standing decisions: Late tile claim).
// JAXDNN_ATTENTION_SM90_DYNAMIC_CLAIM=early (read once) restores the claim at
// Q load, for A/Bs.
bool DynamicClaimLate() { return SwitchText(Switch::kAttentionSm90DynamicClaim) != "early"; }

// The L2-chunked order's chunk: (batch, head) pairs whose K/V take about half
// the L2 (query heads of one kv head share theirs), at least 1.
cudaError_t LptChunkPairs(const AttnShape& s, int device, int* chunk) {
  int dev = 0, l2 = 0;
  cudaError_t err;
  if ((err = DeviceOrCurrent(device, &dev)) != cudaSuccess) return err;
  if ((err = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev)) != cudaSuccess) return err;
  const int64_t group = s.heads / s.kv_heads;
  const int64_t kv_bytes_per_pair = std::max<int64_t>(1, 2 * s.kv_len * s.head_dim * 2 / group);
  const int64_t pairs = s.batch * s.heads;
  *chunk = static_cast<int>(std::min<int64_t>(pairs, std::max<int64_t>(1, l2 / 2 / kv_bytes_per_pair)));
  return cudaSuccess;
}

// 80-key blocks for head dim 256 dense non-causal calls (FA3's tile there):
// 10-15% faster than 64-key blocks (docs/perf/attention.md, Standing
// decisions: d256 on 80-key blocks).
// JAXDNN_ATTENTION_SM90_D256_BLOCKN=64 (read once) keeps 64-key blocks.
bool D256BlockN80() { return SwitchInt(Switch::kAttentionSm90D256BlockN) != 64; }

// The same for head dim 256 dense causal calls (one CTA per tile; a tile's
// top three 80-key blocks masked): +6-13% from seq 2048
// (docs/perf/attention.md, Standing decisions: d256 on 80-key blocks).
// JAXDNN_ATTENTION_SM90_D256_CAUSAL_BLOCKN=64 (read once) keeps 64-key blocks.
bool D256CausalBlockN80() { return SwitchInt(Switch::kAttentionSm90D256CausalBlockN) != 64; }

// Three consumer warpgroups (192-row tiles) for head dim 64 dense non-causal
// calls: 6% faster at seq 1024 and 15-18% at 2048-16384 than two
// (docs/perf/attention.md, Standing decisions: d64 on three consumer
// warpgroups).
// JAXDNN_ATTENTION_SM90_D64_WG3=0 (read once) keeps two.
bool D64ThreeConsumers() { return SwitchOn(Switch::kAttentionSm90D64Wg3); }

// Lazy O rescaling in the forward's online softmax (see FwdParams):
// JAXDNN_ATTENTION_SM90_FWD_RESCALE (read once) = the threshold in log2
// units (8: P up to 256 before normalization), or "always" (every block
// rescales, the classic online softmax). Default: 8 at head dims 128 and 256
// (+0.8-1.4% at d128, +3-9% at d256), always at 64, where it lost 1-3%
// non-causal (docs/perf/attention.md, Standing decisions: Lazy rescale).
float RescaleThreshold(int head_dim) {
  const std::string& v = SwitchText(Switch::kAttentionSm90FwdRescale);
  if (v == "auto") return head_dim == 64 ? -1.f : 8.f;
  if (v == "always") return -1.f;
  return std::strtof(v.c_str(), nullptr);  // the table admits 0..16 only
}

// Whether the problem uses a feature only the extended kernel path handles.
bool NeedsExt(const AttnFwdArgs& a) {
  const AttnMaskParams& m = a.mask_params;
  return a.bias.data != nullptr || m.q_lengths != nullptr || m.kv_lengths != nullptr ||
         m.q_segments != nullptr || m.kv_segments != nullptr || m.window_left >= 0 || m.window_right >= 0 ||
         m.softcap != 0.f || (m.causal && a.shape.q_len != a.shape.kv_len);
}

// Head dim 64 dense causal calls from 2048 keys: the 192-row tiles (three
// consumer warpgroups), which run causal on the dynamic scheduler only, so
// these calls take that scheduler (chunked longest-first order) even where two
// warpgroups keep one CTA per tile (above 2048 keys): +7-15% from 2048 keys,
// -9..-11% below (docs/perf/attention.md, Standing decisions: d64 on three
// consumer warpgroups).
// JAXDNN_ATTENTION_SM90_D64_WG3_CAUSAL=0 (read once) keeps two warpgroups.
constexpr int64_t kD64CausalThreeConsumersMinKeys = 2048;
bool D64ThreeConsumersCausal(const AttnFwdArgs& p) {
  return SwitchOn(Switch::kAttentionSm90D64Wg3Causal) && p.shape.head_dim == 64 && p.mask_params.causal &&
         !NeedsExt(p) && p.shape.kv_len >= kD64CausalThreeConsumersMinKeys;
}

// Whether a launch may run in clusters of two with K/V multicast (variant bit
// 128, see the kernel's kCluster): dense (causal only on the dynamic
// scheduler, at head dim 128: causal pairs), and the two CTAs of a cluster
// always on neighbouring query tiles of one (batch, head) with the same
// number of tiles each: an even number of query tiles per (batch, head).
bool ClusterPairsFit(const AttnFwdArgs& a, int block_m, bool dynamic) {
  const bool causal_ok = dynamic && a.shape.head_dim == 128;
  return !NeedsExt(a) && (!a.mask_params.causal || causal_ok) &&
         (a.shape.q_len + block_m - 1) / block_m % 2 == 0;
}

// Causal pairs on the dynamic scheduler (variant bit 128 with bit 8: the
// kernel's kCausalPairs): two CTAs on neighbouring causal query tiles share
// their common K/V blocks through multicast. Short tiles gain little from the
// shared loads and pay the lockstep (-4.5% at seq 2048), so by default only
// over kDynamicCausalMaxKeys keys, in tile order (+3% at 16384;
// docs/perf/attention.md, Standing decisions: Causal pairs over 8192 keys).
// JAXDNN_ATTENTION_SM90_CAUSAL_PAIRS (read once) = 1 wherever they fit, 0 never.
bool CausalPairs(const AttnFwdArgs& p) {
  const std::string& v = SwitchText(Switch::kAttentionSm90CausalPairs);
  if (v == "0" || !p.mask_params.causal || !ClusterPairsFit(p, 128, true)) return false;
  return v == "1" || p.shape.kv_len > kDynamicCausalMaxKeys;
}

// The persistent grid of a cluster launch: two CTAs per cluster that can be
// resident at once (GPCs may not hold an even number of SMs). Asked once per
// kernel and device (not timed per call).
template <typename Kernel>
cudaError_t PersistentClusterGrid(Kernel kernel, int device, int threads, int smem_bytes, int* grid) {
  struct Occupancy {
    cudaError_t err = cudaErrorNotReady;
    int clusters = 0;
  };
  static PerDevice<Occupancy> cache;
  const Occupancy c = cache.Get(device, [&] {
    Occupancy o;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(2, 1, 1);
    cfg.blockDim = dim3(threads, 1, 1);
    cfg.dynamicSmemBytes = smem_bytes;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int current = 0;
    // The occupancy query asks the current device: make it `device` for the call.
    o.err = cudaGetDevice(&current);
    if (o.err == cudaSuccess && current != device) o.err = cudaSetDevice(device);
    if (o.err == cudaSuccess) o.err = cudaOccupancyMaxActiveClusters(&o.clusters, kernel, &cfg);
    if (current != device) cudaSetDevice(current);
    if (o.err == cudaSuccess && o.clusters < 1) o.err = cudaErrorInvalidConfiguration;
    return o;
  });
  *grid = 2 * c.clusters;
  return c.err;
}

// Clusters of two with K/V multicast for the dense non-causal forward
// (variant bit 128; K/V cross from L2 once per pair of query tiles): head dim
// 128 +1-5%, head dim 256 level, so it stays off there (docs/perf/attention.md,
// Standing decisions: Clusters of two with K/V multicast).
// JAXDNN_ATTENTION_SM90_CLUSTER (read once) = 1 on at both head dims, 0 off;
// unset: head dim 128.
bool ClusterMulticast(int head_dim) {
  const std::string& v = SwitchText(Switch::kAttentionSm90Cluster);
  return v == "auto" ? head_dim == 128 : v == "1";
}

template <int kD, bool kF16, bool kPingpong, bool kPersistent, bool kExt, bool kDynamic = false,
          int kBlockNOpt = 0, int kConsumers = 2, int kCluster = 1, bool kBias = false, int kDv = kD>
LaunchStatus Launch(const AttnFwdArgs& a, cudaStream_t stream, int lpt_chunk_pairs = 0) {
  using Cfg = sm90::FwdConfig<kD, kBlockNOpt, kConsumers, sm90::FwdQBufs<kD, kDynamic, kExt>(), kDv>;
  const AttnShape& s = a.shape;
  // Not every 80-key or 192-row kernel has causal masking compiled in.
  if (!sm90::FwdCausalCompiled<kBlockNOpt, kConsumers, kPersistent, kDynamic>() && a.mask_params.causal) {
    return LaunchStatus::Refused("the sm90 forward variant has no causal masking compiled in");
  }
  CUtensorMap tq, tk, tv, to = {};
  cudaError_t err;
  if ((err = sm90::MakeBhsdTensorMap(&tq, a.q, kF16, s.batch, s.q_len, s.heads, kD, Cfg::kBlockM)) !=
      cudaSuccess)
    return err;
  if constexpr (Cfg::kTmaStoreO) {
    // O: stored per warpgroup, 64 rows at a time (see the kernel's epilogue).
    if ((err = sm90::MakeBhsdTensorMap(&to, a.out, kF16, s.batch, s.q_len, s.heads, kDv, 64)) != cudaSuccess)
      return err;
  }
  // Clusters: each CTA loads half of every K/V block (for both).
  constexpr int kKvBoxRows = Cfg::kBlockN / (kCluster == 2 && JAXDNN_SM90_FWD_CLUSTER_MODE == 0 ? 2 : 1);
  if ((err = sm90::MakeBhsdTensorMap(&tk, a.k, kF16, s.batch, s.kv_len, s.kv_heads, kD, kKvBoxRows)) !=
      cudaSuccess)
    return err;
  if ((err = sm90::MakeBhsdTensorMap(&tv, a.v, kF16, s.batch, s.kv_len, s.kv_heads, kDv, kKvBoxRows)) !=
      cudaSuccess)
    return err;

  sm90::FwdParams p;
  p.batch = static_cast<int>(s.batch);
  p.q_len = static_cast<int>(s.q_len);
  p.kv_len = static_cast<int>(s.kv_len);
  p.heads = static_cast<int>(s.heads);
  p.kv_heads = static_cast<int>(s.kv_heads);
  p.group = static_cast<int>(s.heads / s.kv_heads);
  p.num_m_blocks = static_cast<int>((s.q_len + Cfg::kBlockM - 1) / Cfg::kBlockM);
  p.causal = a.mask_params.causal ? 1 : 0;
  p.scale_log2 = a.mask_params.scale * 1.4426950408889634f;
  p.rescale_threshold = RescaleThreshold(kD);
  p.out = a.out;
  p.lse = a.lse;
  // The float32 workspace's first element, as the int32 claim counter.
  p.tile_counter = kDynamic ? reinterpret_cast<int*>(a.workspace) : nullptr;
  p.lpt_chunk_bh = kDynamic ? lpt_chunk_pairs : 0;
  p.claim_late = kDynamic && DynamicClaimLate() ? 1 : 0;
  if (kDynamic && (a.workspace == nullptr || a.workspace_elems < 1)) {
    return LaunchStatus::Refused("the dynamic sm90 forward has no workspace for its tile counter");
  }
  if constexpr (kExt) {
    p.mask = sm90::MakeSm90MaskParams(a.mask_params, s);
    // Softcap: s = c * tanh(s * scale / c) in the kernel, then softmax with scale 1.
    if (p.mask.softcap > 0.f) p.scale_log2 = 1.4426950408889634f;
    if constexpr (kBias) {
      // Natural units: the bias kernels scale the raw scores themselves.
      p.bias = sm90::MakeSm90BiasParams(a.bias, a.bias_dtype, a.mask_params);
      p.scale_log2 = 1.4426950408889634f;
    }
    // Segment ids: their ranges per 64 keys / rows go after the claim
    // counter (primitives.py sizes the workspace so; Sm90ForwardSupports
    // refuses a call without the room).
    if (p.mask.q_segments != nullptr) {
      if (!SegmentRangesFit(a))
        return LaunchStatus::Refused("the workspace has no room for the segment ranges");
      int2* ranges = reinterpret_cast<int2*>(a.workspace + kSm90TileCounterElems);
      if ((err = sm90::LaunchSegmentRanges(p.mask, p.batch, p.q_len, p.kv_len, ranges, stream)) !=
          cudaSuccess) {
        return err;
      }
    }
  }
  const int smem_bytes = kBias      ? Cfg::kSmemBytesBias
                         : kExt     ? Cfg::kSmemBytesExt
                         : kDynamic ? (kCluster == 2 ? Cfg::kSmemBytesDynamicPairs : Cfg::kSmemBytesDynamic)
                                    : Cfg::kSmemBytes;

  auto kernel = sm90::AttnFwdSm90Kernel<kD, kF16, kPingpong, kPersistent, kExt, kDynamic, kBlockNOpt,
                                        kConsumers, kCluster, kBias, kDv>;
  if ((err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes)) !=
      cudaSuccess) {
    return err;
  }
  const int64_t tiles = static_cast<int64_t>(p.num_m_blocks) * p.heads * p.batch;
  int grid = static_cast<int>(tiles);
  if (kPersistent) {
    int dev = 0, sms = 0;
    if ((err = DeviceOrCurrent(a.device, &dev)) != cudaSuccess) return err;
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return err;
    if (grid > sms) grid = sms;
  }
  if (kDynamic) {
    // Claims start at 0 on every launch (stream-ordered, no host sync: safe
    // under CUDA graph capture).
    if ((err = cudaMemsetAsync(p.tile_counter, 0, sizeof(int), stream)) != cudaSuccess) return err;
  }
  if constexpr (kCluster == 2) {
    static_assert(kPersistent && !kExt, "clusters: dense persistent launches");
    if (!ClusterPairsFit(a, Cfg::kBlockM, kDynamic)) {
      return LaunchStatus::Refused("the problem's query tiles do not pair up for clusters of two");
    }
    int cluster_grid = 0;
    int dev = 0;
    if ((err = DeviceOrCurrent(a.device, &dev)) != cudaSuccess) return err;
    if ((err = PersistentClusterGrid(kernel, dev, Cfg::kThreads, smem_bytes, &cluster_grid)) != cudaSuccess) {
      return err;
    }
    // The fewest clusters with the same number of waves of tile pairs (2048
    // tiles on 66 clusters: 16 waves, so 64 clusters): the spare SMs idle
    // instead of running a half-empty last wave, and under the power limit
    // the busy ones clock higher: +1-2% at seq 2048-4096 (docs/perf/log.md,
    // attention v37-v38).
    // Not for causal pairs: there the tiles of a (batch, head)
    // differ in length, and a stride that is a multiple of its tile count (128
    // CTAs over 16 tiles a head at seq 2048) hands every CTA the same tile
    // length over and over (docs/perf/log.md, attention v39).
    const int64_t pairs = tiles / 2;  // tiles is even here
    const int64_t waves = (pairs + cluster_grid / 2 - 1) / (cluster_grid / 2);
    grid = a.mask_params.causal ? static_cast<int>(std::min<int64_t>(tiles, cluster_grid))
                                : static_cast<int>(2 * ((pairs + waves - 1) / waves));
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(grid, 1, 1);
    cfg.blockDim = dim3(Cfg::kThreads, 1, 1);
    cfg.dynamicSmemBytes = smem_bytes;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if ((err = cudaLaunchKernelEx(&cfg, kernel, tq, tk, tv, to, p)) != cudaSuccess) return err;
    return cudaGetLastError();
  }
  kernel<<<grid, Cfg::kThreads, smem_bytes, stream>>>(tq, tk, tv, to, p);
  return cudaGetLastError();
}

}  // namespace

bool Sm90ForwardValueDimFits(const AttnFwdArgs& p) {
  const AttnShape& s = p.shape;
  const bool mla192 = s.head_dim == 192 && s.vdim() == 128 && SwitchOn(Switch::kAttentionSm90NativeDims);
  const bool mla128 = s.head_dim == 128 && s.vdim() == 64 && SwitchOn(Switch::kAttentionSm90ValueDim64);
  return (mla192 || mla128) && SwitchOn(Switch::kAttentionSm90NativeValueDim) && !NeedsExt(p) &&
         p.bias.data == nullptr && p.mask.data == nullptr && p.mask_params.dropout_rate == 0.f;
}

bool Sm90ForwardSupports(const AttnFwdArgs& p) {
  const AttnShape& s = p.shape;
  const AttnMaskParams& m = p.mask_params;
  if (p.dtype != ffi::DataType::BF16 && p.dtype != ffi::DataType::F16) return false;
  const bool native_dim = s.head_dim == 96 || s.head_dim == 192;  // no bias kernels there
  if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256 && !native_dim) return false;
  if (native_dim && (p.bias.data != nullptr || !SwitchOn(Switch::kAttentionSm90NativeDims))) return false;
  if (s.batch < 1 || s.q_len < 1 || s.kv_len < 1 || s.heads < 1 || s.kv_heads < 1) return false;
  if (s.heads % s.kv_heads != 0) return false;
  if (s.q_len > (int64_t{1} << 30) || s.kv_len > (int64_t{1} << 30) ||
      (s.q_len + 127) / 128 * s.heads * s.batch > int64_t{0x7fffffff}) {
    return false;
  }
  if (p.mask.data != nullptr) return false;
  if (s.vdim() != s.head_dim && !Sm90ForwardValueDimFits(p)) return false;
  if (p.bias.data != nullptr && (!BiasEnabled() || !sm90::Sm90BiasFits(p.bias, p.bias_dtype, s)))
    return false;
  if (m.dropout_rate != 0.f) return false;
  if (!(m.scale > 0.f)) return false;
  if (NeedsExt(p)) {
    // Lengths, segments, window, softcap, causal with q_len != kv_len:
    // unless JAXDNN_ATTENTION_SM90_EXT=0.
    if (!ExtEnabled()) return false;
    if ((m.q_segments == nullptr) != (m.kv_segments == nullptr)) return false;
    // Segment ids: the producer votes from their ranges, kept in the workspace.
    if (m.q_segments != nullptr && !SegmentRangesFit(p)) return false;
    if (m.softcap < 0.f || !(m.softcap == m.softcap)) return false;
  }
  if (!Aligned16(p.q) || !Aligned16(p.k) || !Aligned16(p.v) || !Aligned16(p.out) || p.lse == nullptr) {
    return false;
  }
  return sm90::Sm90DeviceReady(p.device);
}

LaunchStatus LaunchAttentionFwdSm90Variant(const AttnFwdArgs& p, cudaStream_t stream, int variant) {
  const bool f16 = p.dtype == ffi::DataType::F16;
  const int d = static_cast<int>(p.shape.head_dim);
  const AttnMaskParams& m = p.mask_params;
  const bool needs_ext = NeedsExt(p);
  if (variant < 0) {
    // Uneven tiles (a band: causal, window; packed documents): one CTA per
    // tile, or the dynamic scheduler where it wins (see DefaultDynamicBits),
    // given a workspace. Python's workspace rule (primitives.py) mirrors
    // `uneven`. Even tiles: persistent CTAs with a static stride.
    const bool uneven = m.causal || m.window_left >= 0 || m.window_right >= 0 || m.q_segments != nullptr;
    const int switch_bits = DynamicVariantBits();
    const bool wg3_causal = D64ThreeConsumersCausal(p);
    const int bits = switch_bits >= 0 ? switch_bits
                     : wg3_causal     ? kFwdDynamic | kFwdLptOrder
                                      : DefaultDynamicBits(p);
    const bool dynamic = uneven && bits != 0 && p.workspace != nullptr && p.workspace_elems >= 1;
    variant = dynamic ? bits | kFwdPingpong : (uneven ? kFwdPingpong : kFwdPingpong | kFwdPersistent);
    // Ignored below unless dense d256 (and, causal, not persistent).
    if (!dynamic && (m.causal ? D256CausalBlockN80() : D256BlockN80())) variant |= kFwdBlockN80;
    if (!dynamic && d == 64 && D64ThreeConsumers()) variant |= kFwdThreeConsumers;  // likewise, d64
    if (dynamic && wg3_causal) variant |= kFwdThreeConsumers;
    if (!uneven && ClusterMulticast(d)) variant |= kFwdCluster;  // taken where ClusterPairsFit, below
    if (dynamic && CausalPairs(p)) variant |= kFwdCluster;
  }
  if (p.shape.vdim() != p.shape.head_dim) {
    // MLA: the dense kernels with value's own columns, persistent when not
    // causal, one CTA per tile when causal. 192/128 on the 192 kernels of
    // 80-key blocks; 128/64 on the 128 ones without clusters or the dynamic
    // scheduler (JAXDNN_ATTENTION_SM90_VALUE_DIM_64).
    if (!Sm90ForwardValueDimFits(p)) {
      return LaunchStatus::Refused(
          "the sm90 forward takes a value head dim of its own at 192/128 (and 128/64), dense only");
    }
    if (d == 128) {
      if (!m.causal) {
        return f16 ? Launch<128, true, true, true, false, false, 0, 2, 1, false, 64>(p, stream)
                   : Launch<128, false, true, true, false, false, 0, 2, 1, false, 64>(p, stream);
      }
      return f16 ? Launch<128, true, true, false, false, false, 0, 2, 1, false, 64>(p, stream)
                 : Launch<128, false, true, false, false, false, 0, 2, 1, false, 64>(p, stream);
    }
    if (!m.causal) {
      return f16 ? Launch<192, true, true, true, false, false, 80, 2, 1, false, 128>(p, stream)
                 : Launch<192, false, true, true, false, false, 80, 2, 1, false, 128>(p, stream);
    }
    return f16 ? Launch<192, true, true, false, false, false, 80, 2, 1, false, 128>(p, stream)
               : Launch<192, false, true, false, false, false, 80, 2, 1, false, 128>(p, stream);
  }
  if (d == 96 || d == 192) {
    // Head dims 96 and 192: pingpong, persistent unless the tiles are uneven
    // (one CTA per tile); no dynamic scheduler, clusters or bias kernels yet.
    const bool ext = needs_ext || (variant & kFwdForceExt) != 0;
    const bool persistent = (variant & kFwdPersistent) != 0;
    // Head dim 192, dense: 80-key blocks as at 256 (the default bits carry
    // kFwdBlockN80 unless its switches keep 64), persistent when not causal.
    if (d == 192 && !ext && (variant & kFwdBlockN80) != 0 && (!m.causal || !persistent)) {
      if (persistent) {
        return f16 ? Launch<192, true, true, true, false, false, 80>(p, stream)
                   : Launch<192, false, true, true, false, false, 80>(p, stream);
      }
      return f16 ? Launch<192, true, true, false, false, false, 80>(p, stream)
                 : Launch<192, false, true, false, false, false, 80>(p, stream);
    }
#define JAXDNN_SM90_NATIVE_CASE(D)                                                \
  if (d == D) {                                                                   \
    if (ext) {                                                                    \
      return persistent ? (f16 ? Launch<D, true, true, true, true>(p, stream)     \
                               : Launch<D, false, true, true, true>(p, stream))   \
                        : (f16 ? Launch<D, true, true, false, true>(p, stream)    \
                               : Launch<D, false, true, false, true>(p, stream)); \
    }                                                                             \
    return persistent ? (f16 ? Launch<D, true, true, true, false>(p, stream)      \
                             : Launch<D, false, true, true, false>(p, stream))    \
                      : (f16 ? Launch<D, true, true, false, false>(p, stream)     \
                             : Launch<D, false, true, false, false>(p, stream));  \
  }
    JAXDNN_SM90_NATIVE_CASE(96)
    JAXDNN_SM90_NATIVE_CASE(192)
#undef JAXDNN_SM90_NATIVE_CASE
  }
  if (p.bias.data != nullptr) {
    // The bias kernels: one CTA per tile with pingpong, whatever the variant.
#define JAXDNN_SM90_BIAS_CASE(D)                                                       \
  if (d == D) {                                                                        \
    return f16 ? Launch<D, true, true, false, true, false, 0, 2, 1, true>(p, stream)   \
               : Launch<D, false, true, false, true, false, 0, 2, 1, true>(p, stream); \
  }
    JAXDNN_SM90_BIAS_CASE(128)
    JAXDNN_SM90_BIAS_CASE(64)
    JAXDNN_SM90_BIAS_CASE(256)
#undef JAXDNN_SM90_BIAS_CASE
    return LaunchStatus::Refused("no sm90 bias forward is compiled for this head dim");
  }
  const bool ext = needs_ext || (variant & kFwdForceExt) != 0;
  // Bit 64, three consumer warpgroups (192-row tiles): head dim 64, dense; on
  // the static schedule non-causal only, on the dynamic scheduler also causal.
  const bool wg3_bit = (variant & kFwdThreeConsumers) != 0 && d == 64 && !ext;
  if ((variant & kFwdDynamic) != 0) {
    // The dynamic scheduler: persistent CTAs with pingpong (bits 0-1 ignored);
    // + 16: the L2-chunked longest-first tile order.
    if (p.workspace == nullptr || p.workspace_elems < 1) {
      return LaunchStatus::Refused("the dynamic sm90 forward has no workspace for its tile counter");
    }
    int chunk = 0;
    if ((variant & kFwdLptOrder) != 0) {
      if (cudaError_t err = LptChunkPairs(p.shape, p.device, &chunk); err != cudaSuccess) return err;
    }
    if (wg3_bit) {
      return f16 ? Launch<64, true, true, true, false, true, 0, 3>(p, stream, chunk)
                 : Launch<64, false, true, true, false, true, 0, 3>(p, stream, chunk);
    }
    // Bit 128: causal pairs in clusters of two (see CausalPairs), head dim
    // 128 (137 in tile order, 153 in the chunked order); ignored elsewhere.
    if ((variant & kFwdCluster) != 0 && d == 128 && !ext && m.causal && ClusterPairsFit(p, 128, true)) {
      return f16 ? Launch<128, true, true, true, false, true, 0, 2, 2>(p, stream, chunk)
                 : Launch<128, false, true, true, false, true, 0, 2, 2>(p, stream, chunk);
    }
#define JAXDNN_SM90_DYNAMIC_CASE(D)                                            \
  if (d == D) {                                                                \
    if (ext) {                                                                 \
      return f16 ? Launch<D, true, true, true, true, true>(p, stream, chunk)   \
                 : Launch<D, false, true, true, true, true>(p, stream, chunk); \
    }                                                                          \
    return f16 ? Launch<D, true, true, true, false, true>(p, stream, chunk)    \
               : Launch<D, false, true, true, false, true>(p, stream, chunk);  \
  }
    JAXDNN_SM90_DYNAMIC_CASE(128)
    JAXDNN_SM90_DYNAMIC_CASE(64)
    JAXDNN_SM90_DYNAMIC_CASE(256)
#undef JAXDNN_SM90_DYNAMIC_CASE
    return LaunchStatus::Refused("no dynamic sm90 forward is compiled for this head dim");
  }
  // Bit 128, clusters of two with K/V multicast: dense non-causal persistent
  // pingpong launches (3 or 35) at head dims 128 and 256 with an even number
  // of query tiles per (batch, head); ignored otherwise.
  if ((variant & kFwdCluster) != 0 && (variant & 3) == 3 && !ext && (d == 128 || d == 256) && !m.causal &&
      ClusterPairsFit(p, 128, false)) {
    if (d == 128) {
      return f16 ? Launch<128, true, true, true, false, false, 0, 2, 2>(p, stream)
                 : Launch<128, false, true, true, false, false, 0, 2, 2>(p, stream);
    }
    if ((variant & kFwdBlockN80) != 0) {
      return f16 ? Launch<256, true, true, true, false, false, 80, 2, 2>(p, stream)
                 : Launch<256, false, true, true, false, false, 80, 2, 2>(p, stream);
    }
    return f16 ? Launch<256, true, true, true, false, false, 0, 2, 2>(p, stream)
               : Launch<256, false, true, true, false, false, 0, 2, 2>(p, stream);
  }
  // Bit 32, 80-key blocks: head dim 256, dense (no ext), static schedule,
  // causal only without persistence (the kernels with causal masking);
  // ignored (64-key blocks) for every other launch.
  const bool blockn80 =
      (variant & kFwdBlockN80) != 0 && d == 256 && !ext && (!m.causal || (variant & kFwdPersistent) == 0);
  // Bit 64 on the static schedule: non-causal persistent launches only (the
  // instantiated ones); ignored otherwise.
  const bool wg3 = wg3_bit && !m.causal && (variant & kFwdPersistent) != 0;
  variant &= 3;
  if (wg3) {
#define JAXDNN_SM90_WG3_CASE(PP, PERS)                                       \
  if (variant == (PP) + 2 * (PERS)) {                                        \
    return f16 ? Launch<64, true, PP, PERS, false, false, 0, 3>(p, stream)   \
               : Launch<64, false, PP, PERS, false, false, 0, 3>(p, stream); \
  }
    JAXDNN_SM90_WG3_CASE(false, true)
    JAXDNN_SM90_WG3_CASE(true, true)
#undef JAXDNN_SM90_WG3_CASE
    return LaunchStatus::Refused("no three-warpgroup sm90 forward is compiled for this variant");
  }
  if (blockn80) {
#define JAXDNN_SM90_N80_CASE(PP, PERS)                                      \
  if (variant == (PP) + 2 * (PERS)) {                                       \
    return f16 ? Launch<256, true, PP, PERS, false, false, 80>(p, stream)   \
               : Launch<256, false, PP, PERS, false, false, 80>(p, stream); \
  }
    JAXDNN_SM90_N80_CASE(false, false)
    JAXDNN_SM90_N80_CASE(true, false)
    JAXDNN_SM90_N80_CASE(false, true)
    JAXDNN_SM90_N80_CASE(true, true)
#undef JAXDNN_SM90_N80_CASE
    return LaunchStatus::Refused("no 80-key-block sm90 forward is compiled for this variant");
  }
#define JAXDNN_SM90_CASE(D, PP, PERS)                                                                        \
  if (d == D && variant == (PP) + 2 * (PERS)) {                                                              \
    if (ext) {                                                                                               \
      return f16 ? Launch<D, true, PP, PERS, true>(p, stream) : Launch<D, false, PP, PERS, true>(p, stream); \
    }                                                                                                        \
    return f16 ? Launch<D, true, PP, PERS, false>(p, stream) : Launch<D, false, PP, PERS, false>(p, stream); \
  }
  JAXDNN_SM90_CASE(128, false, false)
  JAXDNN_SM90_CASE(128, true, false)
  JAXDNN_SM90_CASE(128, false, true)
  JAXDNN_SM90_CASE(128, true, true)
  JAXDNN_SM90_CASE(64, false, false)
  JAXDNN_SM90_CASE(64, true, false)
  JAXDNN_SM90_CASE(64, false, true)
  JAXDNN_SM90_CASE(64, true, true)
  JAXDNN_SM90_CASE(256, false, false)
  JAXDNN_SM90_CASE(256, true, false)
  JAXDNN_SM90_CASE(256, false, true)
  JAXDNN_SM90_CASE(256, true, true)
#undef JAXDNN_SM90_CASE
  return LaunchStatus::Refused("no sm90 forward is compiled for this head dim and variant");
}

LaunchStatus LaunchAttentionFwdSm90(const AttnFwdArgs& p, cudaStream_t stream) {
  return LaunchAttentionFwdSm90Variant(p, stream, kSm90DefaultVariant);
}

}  // namespace jaxdnn::attention
