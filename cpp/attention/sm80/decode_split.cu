// Instantiates the split-KV decode kernels per dtype, head dim and rows per
// CTA, and launches phase 1 and phase 2 on XLA's stream.
#include "attention/sm80/decode_split.h"

#include <cstdint>

#include "common/cuda_device.h"

#include "attention/sm80/decode_combine.cuh"
#include "attention/sm80/decode_split.cuh"

namespace jaxdnn::attention {
namespace {

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

// Phase-1 CTAs resident per SM for this instantiation (its shared memory
// opt-in set first, as the launch needs it anyway). Queried once per process
// and instantiation, off the per-call path (it only steers the split count).
template <typename T, int kD, int kRowTiles>
cudaError_t ResidentCtasPerSm(int device, bool paged, int* ctas) {
  struct Query {
    cudaError_t err = cudaErrorNotReady;
    int ctas = 0;
  };
  static PerDevice<Query> cache[2];  // contiguous, paged (more shared memory)
  const Query query = cache[paged].Get(device, [paged] {
    Query q;
    const int smem = DecodeSmemBytes<kD, kRowTiles>(paged);
    q.err = cudaFuncSetAttribute(DecodeSplitPartialKernel<T, kD, kRowTiles>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 DecodeSmemBytes<kD, kRowTiles>(true));
    if (q.err == cudaSuccess) {
      q.err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &q.ctas, DecodeSplitPartialKernel<T, kD, kRowTiles>, kDecodeThreads, smem);
    }
    return q;
  });
  *ctas = query.ctas;
  return query.err;
}

template <typename T, int kD>
LaunchStatus ResidentByRowTiles(int device, bool paged, int row_tiles, int* ctas) {
  switch (row_tiles) {
    case 1: return ResidentCtasPerSm<T, kD, 1>(device, paged, ctas);
    case 2: return ResidentCtasPerSm<T, kD, 2>(device, paged, ctas);
    case 4: return ResidentCtasPerSm<T, kD, 4>(device, paged, ctas);
    default: return LaunchStatus::Refused("no split-KV decode is compiled for the plan's row tiles");
  }
}

template <typename T>
LaunchStatus ResidentByHeadDim(int device, bool paged, int head_dim, int row_tiles, int* ctas) {
  switch (head_dim) {
    case 64: return ResidentByRowTiles<T, 64>(device, paged, row_tiles, ctas);
    case 128: return ResidentByRowTiles<T, 128>(device, paged, row_tiles, ctas);
    case 256: return ResidentByRowTiles<T, 256>(device, paged, row_tiles, ctas);
    default: return LaunchStatus::Refused("no split-KV decode is compiled for this head dim");
  }
}

template <typename T, int kD, int kRowTiles>
cudaError_t LaunchPhases(const DecodeSplitParams& dp, const DecodeSplitPlan& plan, cudaStream_t stream) {
  const AttnShape& s = dp.args.shape;
  const int smem = DecodeSmemBytes<kD, kRowTiles>(dp.args.paged.on());
  // Above 48 KB of dynamic shared memory needs the per-function, per-device
  // opt-in (set to the paged launches' larger size): a host-side attribute
  // (no stream work), so graph-capture safe.
  cudaError_t err =
      cudaFuncSetAttribute(DecodeSplitPartialKernel<T, kD, kRowTiles>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, DecodeSmemBytes<kD, kRowTiles>(true));
  if (err != cudaSuccess) return err;
  const dim3 grid(unsigned(plan.splits), unsigned(s.kv_heads * plan.row_groups), unsigned(s.batch));
  DecodeSplitPartialKernel<T, kD, kRowTiles><<<grid, kDecodeThreads, smem, stream>>>(dp);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;

  const int64_t rows = s.batch * s.heads * s.q_len;
  const int warps_per_row = DecodeCombineWarpsPerRow(dp.slots);
  const int64_t rows_per_block = kDecodeCombineWarps / warps_per_row;
  DecodeCombineKernel<T, kD>
      <<<unsigned((rows + rows_per_block - 1) / rows_per_block), kDecodeCombineThreads, 0, stream>>>(
          dp.partial_o, dp.partial_ml, dp.slots, warps_per_row, s, static_cast<T*>(dp.args.out), dp.args.lse);
  return cudaGetLastError();
}

template <typename T, int kD>
LaunchStatus ByRowTiles(const DecodeSplitParams& dp, const DecodeSplitPlan& plan, cudaStream_t stream) {
  switch (plan.row_tiles) {
    case 1: return LaunchPhases<T, kD, 1>(dp, plan, stream);
    case 2: return LaunchPhases<T, kD, 2>(dp, plan, stream);
    case 4: return LaunchPhases<T, kD, 4>(dp, plan, stream);
    default: return LaunchStatus::Refused("no split-KV decode is compiled for the plan's row tiles");
  }
}

template <typename T>
LaunchStatus ByHeadDim(const DecodeSplitParams& dp, const DecodeSplitPlan& plan, cudaStream_t stream) {
  switch (dp.args.shape.head_dim) {
    case 64: return ByRowTiles<T, 64>(dp, plan, stream);
    case 128: return ByRowTiles<T, 128>(dp, plan, stream);
    case 256: return ByRowTiles<T, 256>(dp, plan, stream);
    default: return LaunchStatus::Refused("no split-KV decode is compiled for this head dim");
  }
}

}  // namespace

bool DecodeSplitKernelTakes(const AttnFwdArgs& p) {
  const AttnShape& s = p.shape;
  const AttnMaskParams& m = p.mask_params;
  if (p.dtype != ffi::DataType::BF16 && p.dtype != ffi::DataType::F16) return false;
  if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256) return false;
  if (s.vdim() != s.head_dim) return false;
  if (s.batch < 1 || s.q_len < 1 || s.q_len > kDecodeMaxQueryLen || s.kv_len < 1) return false;
  if (s.heads < 1 || s.kv_heads < 1 || s.heads % s.kv_heads != 0) return false;
  if (p.bias.data != nullptr || p.mask.data != nullptr) return false;
  if (m.q_segments != nullptr || m.kv_segments != nullptr) return false;
  if (m.seeds != nullptr && m.dropout_rate > 0.f) return false;
  if (m.dropout_rate != 0.f) return false;
  if (m.softcap < 0.f || !(m.softcap == m.softcap)) return false;
  if (!Aligned16(p.q) || !Aligned16(p.k) || !Aligned16(p.v) || !Aligned16(p.out) || p.lse == nullptr) {
    return false;
  }
  const DecodeSplitPlan plan = MakeDecodeSplitPlan(s);
  return s.batch <= 65535 && s.kv_heads * plan.row_groups <= 65535 && s.kv_len < (int64_t{1} << 31);
}

bool DecodeSplitSupports(const AttnFwdArgs& p) {
  if (!DecodeSplitKernelTakes(p) || !DecodeSplitShapeFits(p.shape)) return false;
  return p.workspace != nullptr && p.workspace_elems >= DecodeWorkspaceElems(p.shape);
}

DecodeSplitPlan DecodeSplitPlanWithSplits(const AttnShape& s, int64_t splits) {
  DecodeSplitPlan plan = MakeDecodeSplitPlan(s);
  const int64_t kv = s.kv_len > 0 ? s.kv_len : 1;
  if (splits < 1) splits = 1;
  plan.chunk = DecodeCeilDiv(DecodeCeilDiv(kv, splits), kDecodeChunkAlign) * kDecodeChunkAlign;
  plan.splits = DecodeCeilDiv(kv, plan.chunk);
  return plan;
}

LaunchStatus FitDecodeSplitPlanToWaves(const AttnFwdArgs& p, const DecodeSplitPlan& plan,
                                       DecodeSplitPlan* fitted) {
  *fitted = plan;
  int per_sm = 0, dev = 0, sms = 0;
  cudaError_t err = DeviceOrCurrent(p.device, &dev);
  if (err != cudaSuccess) return err;
  const LaunchStatus resident =
      p.dtype == ffi::DataType::F16
          ? ResidentByHeadDim<__half>(dev, p.paged.on(), static_cast<int>(p.shape.head_dim), plan.row_tiles,
                                      &per_sm)
          : ResidentByHeadDim<__nv_bfloat16>(dev, p.paged.on(), static_cast<int>(p.shape.head_dim),
                                             plan.row_tiles, &per_sm);
  if (!resident.ok()) return resident;
  if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return err;
  const int64_t slots = static_cast<int64_t>(per_sm) * sms;
  if (slots < 1) return cudaSuccess;
  // The CTAs other than the splits: (kv head x row group, batch).
  const int64_t base = p.shape.kv_heads * plan.row_groups * p.shape.batch;
  const int64_t kv = p.shape.kv_len > 0 ? p.shape.kv_len : 1;
  double best = -1.0;
  int64_t best_want = plan.splits;
  for (int64_t want = plan.splits; want >= 1; --want) {
    // The split count DecodeSplitPlanWithSplits(p.shape, want) comes out with.
    const int64_t chunk = DecodeCeilDiv(DecodeCeilDiv(kv, want), kDecodeChunkAlign) * kDecodeChunkAlign;
    const int64_t splits = DecodeCeilDiv(kv, chunk);
    if (splits > plan.splits) continue;
    const int64_t ctas = base * splits;
    const int64_t waves = (ctas + slots - 1) / slots;
    const double fill = static_cast<double>(ctas) / static_cast<double>(waves * slots);
    if (fill > best + 1e-9) {  // strictly better: ties keep the larger split count
      best = fill;
      best_want = want;
    }
  }
  if (best >= 0.0) *fitted = DecodeSplitPlanWithSplits(p.shape, best_want);
  return cudaSuccess;
}

LaunchStatus LaunchAttentionFwdDecodeSplit(const AttnFwdArgs& p, const DecodeSplitPlan& plan,
                                           cudaStream_t stream) {
  const AttnShape& s = p.shape;
  if (p.workspace == nullptr || p.workspace_elems < DecodeWorkspaceElemsForPlan(s, plan)) {
    return LaunchStatus::Refused("the workspace is smaller than the split-KV decode plan's partials");
  }
  DecodeSplitParams dp;
  dp.args = p;
  dp.rows = plan.rows;
  dp.row_groups = plan.row_groups;
  dp.chunk = plan.chunk;
  dp.slots = plan.slots();
  dp.partial_o = p.workspace;
  dp.partial_ml = p.workspace + s.batch * s.heads * s.q_len * plan.slots() * s.head_dim;
  switch (p.dtype) {
    case ffi::DataType::BF16: return ByHeadDim<__nv_bfloat16>(dp, plan, stream);
    case ffi::DataType::F16: return ByHeadDim<__half>(dp, plan, stream);
    default: return LaunchStatus::Refused("the split-KV decode takes bfloat16 and float16 only");
  }
}

LaunchStatus LaunchPagedDecode(const AttnFwdArgs& p, cudaStream_t stream) {
  if (!p.paged.on()) return LaunchStatus::Refused("the paged decode needs block tables");
  if (p.shape.batch == 0 || p.shape.q_len == 0 || p.shape.heads == 0)
    return cudaSuccess;  // nothing to compute
  if (!DecodeSplitKernelTakes(p) || !PagedDecodeShapeFits(p.shape)) {
    return LaunchStatus::Refused(
        "the paged decode takes bfloat16/float16, head_dim 64, 128 or 256, at most 16 query tokens, "
        "kv heads dividing heads and 16-byte aligned buffers");
  }
  DecodeSplitPlan plan;
  if (LaunchStatus st = FitDecodeSplitPlanToWaves(p, MakeDecodeSplitPlan(p.shape), &plan); !st.ok()) {
    return st;
  }
  return LaunchAttentionFwdDecodeSplit(p, plan, stream);
}

}  // namespace jaxdnn::attention
