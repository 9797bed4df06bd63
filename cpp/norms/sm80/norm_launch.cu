// Launch selection for the CUDA norms: dtype, kind, fused residual and the
// row layout (norms/sm80/norm_config.h) pick one kernel instantiation.
#include "norms/sm80/norm_launch.h"

#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "common/cuda_vec.cuh"
#include "common/switches.h"
#include "norms/plan.h"
#include "norms/sm80/norm_backward.cuh"
#include "norms/sm80/norm_backward_phased.cuh"
#include "norms/sm80/norm_backward_ring.cuh"
#include "norms/sm80/norm_config.h"
#include "norms/sm80/norm_forward.cuh"
#include "norms/sm80/norm_forward_pairs.cuh"
#include "norms/sm80/norm_forward_phased.cuh"
#include "norms/sm80/norm_params.cuh"
#include "norms/sm80/norm_stream.cuh"

namespace jaxdnn::norms {
namespace {

constexpr int kFwdBlockThreads = 128;
constexpr int kFwdMaxVpt = 4;

// JAXDNN_NORM_FWD_VPT=1|2|4|8 overrides how many 16-byte vectors per thread
// the forward starts from (fewer threads and more rows resident per SM with
// more), for A/Bs.
int FwdStartVpt() { return static_cast<int>(SwitchInt(Switch::kNormFwdVpt, kFwdMaxVpt)); }
int64_t FwdFillThreads() { return SwitchInt(Switch::kNormFwdFill, kFillThreads); }

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// 16-bit LayerNorm forwards run on NormFwdPairKernel wherever it fits (rows of
// 64-1024 vectors: 512-8192 wide): 8192x8192 86 -> 89% of copy, 16384x1024
// 72 -> 81 (docs/perf/norms.md, Standing decisions: Row-pair LayerNorm forward).
// JAXDNN_NORM_FWD=rows (read once) keeps them on NormFwdVecKernel.
bool UsePairKernel(const NormShape& s, int elems_per_vec, bool aligned) {
  return SwitchText(Switch::kNormFwd) != "rows" && PairKernelFits(s, elems_per_vec, aligned);
}

template <typename T, bool kLayer, bool kResidual>
void LaunchFwdVec(int vpt, const dim3& grid, const dim3& block, cudaStream_t stream, const NormFwdArgs& p) {
  // LayerNorm reads scale and bias with an L1 evict-last hint (70 -> 73% of
  // copy at 32768x4096); RMSNorm (scale only) lost 7% with it, so it keeps the
  // plain read (docs/perf/norms.md, Standing decisions: L1 evict-last parameter
  // reads).
  constexpr bool kKeep = kLayer;
  switch (vpt) {
    case 1: NormFwdVecKernel<T, kLayer, kResidual, 1, kKeep><<<grid, block, 0, stream>>>(p); break;
    case 2: NormFwdVecKernel<T, kLayer, kResidual, 2, kKeep><<<grid, block, 0, stream>>>(p); break;
    case 4: NormFwdVecKernel<T, kLayer, kResidual, 4, kKeep><<<grid, block, 0, stream>>>(p); break;
    case 8: NormFwdVecKernel<T, kLayer, kResidual, 8, kKeep><<<grid, block, 0, stream>>>(p); break;
    default: break;
  }
}

// Rows the register kernel cannot hold (odd widths, unaligned views, rows
// over 512 threads' registers): two sweeps, the second from L2.
template <typename T, bool kLayer, bool kResidual>
void LaunchFwdStream(bool aligned, cudaStream_t stream, const NormFwdArgs& p) {
  const StreamLaunch l = ChooseFwdStream(p.shape.dim, Vec16<T>::kElems, aligned);
  const dim3 block(l.tpr, l.rpc);
  const dim3 grid(unsigned((p.shape.rows + l.rpc - 1) / l.rpc));
  if (l.vec) {
    NormFwdStreamKernel<T, kLayer, kResidual, true><<<grid, block, 0, stream>>>(p);
  } else {
    NormFwdStreamKernel<T, kLayer, kResidual, false><<<grid, block, 0, stream>>>(p);
  }
}

// Odd widths without a residual or per-group parameters, in aligned
// buffers: the phase-grouped vector kernel; false where it does not apply.
template <typename T, bool kLayer>
bool LaunchFwdPhased(cudaStream_t stream, const NormFwdArgs& p) {
  constexpr int N = Vec16<T>::kElems;
  if (p.shape.dim % N == 0 || p.shape.groups != 1 || !Aligned16(p.x) || !Aligned16(p.y)) return false;
  if (SwitchText(Switch::kNormFwd) == "stream") return false;
  const PhasedLaunch l =
      ChoosePhased(p.shape.rows, p.shape.dim, N, PhaseCountOfBytes(p.shape.dim * int64_t(sizeof(T))));
  const dim3 grid(unsigned(l.blocks)), block(l.tpr);
  switch (l.vpt) {
    case 1: NormFwdPhasedKernel<T, kLayer, 1><<<grid, block, 0, stream>>>(p, l.rows_per_block); return true;
    case 2: NormFwdPhasedKernel<T, kLayer, 2><<<grid, block, 0, stream>>>(p, l.rows_per_block); return true;
    case 4: NormFwdPhasedKernel<T, kLayer, 4><<<grid, block, 0, stream>>>(p, l.rows_per_block); return true;
    default: return false;
  }
}

// `aligned`: the rows move in 16-byte vectors and the parameters in
// LoadParam4's 16-byte (float32) or 8-byte (16-bit) loads.
template <typename T, bool kLayer, bool kResidual>
ffi::Error LaunchFwd(const NormFwdArgs& p, cudaStream_t stream) {
  const bool aligned = Aligned16(p.x) && Aligned16(p.y) &&
                       (!kResidual || (Aligned16(p.residual) && Aligned16(p.z))) &&
                       ParamsAligned(p.scale, p.params16) && ParamsAligned(p.bias, p.params16);
  if constexpr (kLayer && !kResidual && sizeof(T) == 2) {
    if (UsePairKernel(p.shape, Vec16<T>::kElems, aligned)) {
      const int64_t nvec = p.shape.dim / Vec16<T>::kElems;
      const dim3 block(RoundUp32((nvec + kPairVpt - 1) / kPairVpt));
      const dim3 grid(unsigned((p.shape.rows + 1) / 2));
      NormFwdPairKernel<T><<<grid, block, 0, stream>>>(p);
      return CheckLaunch("jaxdnn norm forward (row pairs) launch " + ShapeText(p.shape));
    }
  }
  const RowLaunch l = ChooseFwdLaunch(p.shape.rows, p.shape.dim, Vec16<T>::kElems, aligned, FwdStartVpt(),
                                      kFwdBlockThreads, FwdFillThreads());
  if (l.vpt == 0 || SwitchText(Switch::kNormFwd) == "stream") {
    if constexpr (!kResidual) {
      if (LaunchFwdPhased<T, kLayer>(stream, p)) {
        return CheckLaunch("jaxdnn norm forward (phase-grouped) launch " + ShapeText(p.shape));
      }
    }
    LaunchFwdStream<T, kLayer, kResidual>(aligned, stream, p);
    return CheckLaunch("jaxdnn norm forward (two sweeps) launch " + ShapeText(p.shape));
  }
  const dim3 block(l.tpr, l.rpc);
  const dim3 grid(unsigned((p.shape.rows + l.rpc - 1) / l.rpc));
  LaunchFwdVec<T, kLayer, kResidual>(l.vpt, grid, block, stream, p);
  return CheckLaunch("jaxdnn norm forward launch " + ShapeText(p.shape));
}

// Three ring stages (two rows in flight per slot) while that leaves room
// for two blocks per SM, else two.
constexpr size_t kBwdThreeStageSmem = 110 * 1024;
constexpr size_t kMaxSmem = 227 * 1024;

// Rows of one vector per thread (the 4096- and 8192-wide 16-bit rows) run
// the ring backward that keeps x-hat and dy * scale in registers across its
// two passes (NormBwdRingKernel's kKeep): LayerNorm backward 74 -> 81% of
// copy at 32768x4096 (docs/perf/norms.md, Standing decisions: Keep x-hat and
// dy * scale in registers).
// JAXDNN_NORM_BWD=reload selects the two-read form, for A/Bs.
bool BwdKeepEnabled() { return SwitchText(Switch::kNormBwd) != "reload"; }

template <typename T, bool kLayer, bool kResidual, int kVpt, int kStages>
void LaunchBwdRing(const dim3& grid, const dim3& block, size_t smem, cudaStream_t stream,
                   const NormBwdArgs& p, BwdGrid bg) {
  auto* kernel = NormBwdRingKernel<T, kLayer, kResidual, kVpt, kStages>;
  if constexpr (kVpt == 1) {
    if (BwdKeepEnabled()) kernel = NormBwdRingKernel<T, kLayer, kResidual, kVpt, kStages, true>;
  }
  // The dynamic shared-memory limit is a function attribute, not a stream
  // operation, so raising it is safe under graph capture. If it fails, the
  // launch is skipped and CheckLaunch reports that error.
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess) {
    return;
  }
  kernel<<<grid, block, smem, stream>>>(p, bg);
}

template <typename T, bool kLayer, bool kResidual, int kVpt>
bool LaunchBwdVec(const RowLaunch& l, cudaStream_t stream, const NormBwdArgs& p, BwdGrid bg) {
  const dim3 block(l.tpr, l.rpc);
  const dim3 grid(unsigned(p.num_partials), unsigned(p.shape.groups));
  const size_t smem3 = BwdRingSmemBytes(3, l.tpr, l.rpc, kVpt, p.shape.dim);
  const size_t smem2 = BwdRingSmemBytes(2, l.tpr, l.rpc, kVpt, p.shape.dim);
  if (smem3 <= kBwdThreeStageSmem) {
    LaunchBwdRing<T, kLayer, kResidual, kVpt, 3>(grid, block, smem3, stream, p, bg);
  } else if (smem2 <= kMaxSmem) {
    LaunchBwdRing<T, kLayer, kResidual, kVpt, 2>(grid, block, smem2, stream, p, bg);
  } else {
    return false;
  }
  return true;
}

// Odd widths (no residual, one group, aligned buffers) on the phase-grouped
// backward, when the plan gave it a whole number of blocks per phase; false
// where it does not apply.
template <typename T, bool kLayer>
bool LaunchBwdPhased(bool aligned, cudaStream_t stream, const NormBwdArgs& p) {
  constexpr int N = Vec16<T>::kElems;
  if (!aligned || p.shape.dim % N == 0 || p.shape.groups != 1 || BwdStreamForced()) return false;
  const int phases = PhaseCountOfBytes(p.shape.dim * int64_t(sizeof(T)));
  const PhasedLaunch l = ChoosePhased(p.shape.rows, p.shape.dim, N, phases, 16 / N, kPhasedBwdMinBody);
  if (l.vpt == 0 || p.num_partials % phases != 0) return false;
  const int64_t chunks = p.num_partials / phases, per_phase = (p.shape.rows + phases - 1) / phases;
  const int64_t rows_per_block = (per_phase + chunks - 1) / chunks;
  const dim3 grid(unsigned(p.num_partials)), block(l.tpr);
  switch (l.vpt) {
    case 1: NormBwdPhasedKernel<T, kLayer, 1><<<grid, block, 0, stream>>>(p, rows_per_block); return true;
    case 2: NormBwdPhasedKernel<T, kLayer, 2><<<grid, block, 0, stream>>>(p, rows_per_block); return true;
    case 4:
      if constexpr (N == 4) {
        NormBwdPhasedKernel<T, kLayer, 4><<<grid, block, 0, stream>>>(p, rows_per_block);
        return true;
      }
      return false;
    default: return false;
  }
}

// Rows the ring kernel cannot take, whose partials fit shared memory, one
// CTA's or a cluster's (ChooseBwdStream); false for wider rows.
template <typename T, bool kLayer, bool kResidual>
bool LaunchBwdStream(bool aligned, cudaStream_t stream, const NormBwdArgs& p, BwdGrid bg) {
  const StreamLaunch l = ChooseBwdStream(p.shape.dim, Vec16<T>::kElems, aligned);
  if (l.blocks_per_sm == 0) return false;
  void (*kernel)(NormBwdArgs, BwdGrid) =
      l.cluster > 1 ? (l.vec ? NormBwdStreamKernel<T, kLayer, kResidual, true, true>
                             : NormBwdStreamKernel<T, kLayer, kResidual, false, true>)
                    : (l.vec ? NormBwdStreamKernel<T, kLayer, kResidual, true>
                             : NormBwdStreamKernel<T, kLayer, kResidual, false>);
  // A function attribute, not a stream operation: safe under graph capture.
  // If it fails, the launch is skipped and CheckLaunch reports the error.
  if (l.smem > 32 * 1024 &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(l.smem)) != cudaSuccess) {
    return true;
  }
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.blockDim = dim3(l.tpr, l.rpc);
  cfg.gridDim = dim3(unsigned(p.num_partials * l.cluster), unsigned(p.shape.groups));
  cfg.dynamicSmemBytes = l.smem;
  cfg.stream = stream;
  if (l.cluster > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = l.cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  cudaLaunchKernelEx(&cfg, kernel, p, bg);  // CheckLaunch reports a failure
  return true;
}

// Backward blocks of short rows (one vector per thread, under 512 threads a
// row) hold 512 threads' worth of rows, not 256: LayerNorm 16384x1024 2.27 ->
// 2.50 TB/s; 1024 threads and twice the blocks per SM lost (docs/perf/norms.md,
// Standing decisions: 512-thread backward blocks for short rows).
// JAXDNN_NORM_BWD_BLOCK_THREADS=256|1024 (read once) overrides it, for A/Bs.
int BwdBlockThreads() { return static_cast<int>(SwitchInt(Switch::kNormBwdBlockThreads, 512)); }

template <typename T, bool kLayer, bool kResidual>
ffi::Error LaunchBwd(const NormBwdArgs& p, cudaStream_t stream) {
  const bool aligned = Aligned16(p.dy) && Aligned16(p.z) && Aligned16(p.dx) &&
                       (!kResidual || Aligned16(p.dsum)) && ParamsAligned(p.scale, p.params16);
  RowLaunch l = BwdStreamForced() ? RowLaunch{} : ChooseBwdLaunch(p.shape.dim, Vec16<T>::kElems, aligned);
  if (l.vpt == 1 && l.tpr < BwdBlockThreads()) l.rpc = BwdBlockThreads() / l.tpr;
  const int64_t rpg = p.shape.rows_per_group();
  const BwdGrid bg{(rpg + p.num_partials - 1) / p.num_partials};
  bool launched = false;
  switch (l.vpt) {
    case 1: launched = LaunchBwdVec<T, kLayer, kResidual, 1>(l, stream, p, bg); break;
    case 2: launched = LaunchBwdVec<T, kLayer, kResidual, 2>(l, stream, p, bg); break;
    case 4: launched = LaunchBwdVec<T, kLayer, kResidual, 4>(l, stream, p, bg); break;
    default: break;
  }
  if constexpr (!kResidual) {
    if (!launched) launched = LaunchBwdPhased<T, kLayer>(aligned, stream, p);
  }
  if (!launched) launched = LaunchBwdStream<T, kLayer, kResidual>(aligned, stream, p, bg);
  if (!launched) {
    l = ScalarLaunch(p.shape.dim);
    const dim3 grid(unsigned(p.num_partials), unsigned(p.shape.groups));
    NormBwdScalarKernel<T, kLayer, kResidual><<<grid, dim3(l.tpr, l.rpc), 0, stream>>>(p, bg);
  }
  if (auto e = CheckLaunch("jaxdnn norm backward launch " + ShapeText(p.shape)); e.failure()) return e;
  const dim3 rblock(32, unsigned(ReduceWarpsFor(p.shape.dim, p.shape.groups)));
  const dim3 rgrid(unsigned((p.shape.dim + 31) / 32), unsigned(p.shape.groups));
  NormReducePartialsKernel<kLayer><<<rgrid, rblock, 0, stream>>>(p);
  return CheckLaunch("jaxdnn norm backward reduction launch " + ShapeText(p.shape));
}

template <typename T, typename Args, typename Fn>
ffi::Error ByFlags(const Args& p, bool residual, Fn&& fn) {
  const bool layer = p.kind == NormKind::kLayer;
  if (layer && residual) return fn(std::integral_constant<int, 3>{});
  if (layer) return fn(std::integral_constant<int, 2>{});
  if (residual) return fn(std::integral_constant<int, 1>{});
  return fn(std::integral_constant<int, 0>{});
}

template <typename T>
ffi::Error FwdTyped(const NormFwdArgs& p, cudaStream_t stream) {
  return ByFlags<T>(p, p.residual != nullptr, [&](auto flags) {
    constexpr int f = decltype(flags)::value;
    return LaunchFwd<T, (f & 2) != 0, (f & 1) != 0>(p, stream);
  });
}

template <typename T>
ffi::Error BwdTyped(const NormBwdArgs& p, cudaStream_t stream) {
  return ByFlags<T>(p, p.dsum != nullptr, [&](auto flags) {
    constexpr int f = decltype(flags)::value;
    return LaunchBwd<T, (f & 2) != 0, (f & 1) != 0>(p, stream);
  });
}

// Evict-first row accesses only where a problem's rows outgrow half of an
// H100's 50 MB L2: below that, plain accesses leave the rows where the next
// kernel (the backward, or the next call) finds them (XLA's fusions, plain
// accesses, ran 4096 x 1024 float32 rows at 1.5x the rate of the all-streaming
// kernels; docs/perf/norms.md, Current design: Row cache policy).
bool RowCachePolicyStreams(const NormShape& s, ffi::DataType dtype) {
  const int64_t item = dtype == ffi::DataType::F32 ? 4 : 2;
  return s.rows * s.dim * item > (int64_t(24) << 20);
}

}  // namespace

ffi::Error NormFwdCuda(const NormFwdArgs& args, cudaStream_t stream) {
  NormFwdArgs p = args;
  p.stream_rows = RowCachePolicyStreams(p.shape, p.dtype);
  if (p.shape.rows == 0) return ffi::Error::Success();
  ClearStaleLaunchError();
  switch (p.dtype) {
    case ffi::DataType::F32: return FwdTyped<float>(p, stream);
    case ffi::DataType::BF16: return FwdTyped<__nv_bfloat16>(p, stream);
    case ffi::DataType::F16: return FwdTyped<__half>(p, stream);
    default: return InvalidArg("jaxdnn norm", "unsupported dtype");
  }
}

ffi::Error NormBwdCuda(const NormBwdArgs& args, cudaStream_t stream) {
  NormBwdArgs p = args;
  p.stream_rows = RowCachePolicyStreams(p.shape, p.dtype);
  ClearStaleLaunchError();
  if (p.shape.rows == 0) {
    // No rows: the parameter gradients are zero; nothing else to do.
    const size_t bytes = size_t(p.shape.groups * p.shape.dim) * (p.params16 ? 2 : sizeof(float));
    if (cudaMemsetAsync(p.dscale, 0, bytes, stream) != cudaSuccess ||
        (p.dbias && cudaMemsetAsync(p.dbias, 0, bytes, stream) != cudaSuccess)) {
      return CheckLaunch("jaxdnn norm backward memset");
    }
    return ffi::Error::Success();
  }
  switch (p.dtype) {
    case ffi::DataType::F32: return BwdTyped<float>(p, stream);
    case ffi::DataType::BF16: return BwdTyped<__nv_bfloat16>(p, stream);
    case ffi::DataType::F16: return BwdTyped<__half>(p, stream);
    default: return InvalidArg("jaxdnn norm", "unsupported dtype");
  }
}

}  // namespace jaxdnn::norms
