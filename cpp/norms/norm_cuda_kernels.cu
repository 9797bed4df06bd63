// Launch selection for the CUDA norms: dtype, kind, fused residual and the
// row layout (norm_cuda_config.h) pick one kernel instantiation.
#include "norms/norm_cuda_kernels.h"

#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "common/cuda_vec.cuh"
#include "common/env_switch.h"
#include "norms/norm_cuda_backward.cuh"
#include "norms/norm_cuda_backward_ring.cuh"
#include "norms/norm_cuda_backward_smem.cuh"
#include "norms/norm_cuda_config.h"
#include "norms/norm_cuda_forward.cuh"
#include "norms/norm_cuda_forward_columns.cuh"
#include "norms/norm_cuda_forward_warprows.cuh"

namespace jaxdnn::norms {
namespace {

constexpr int kFwdBlockThreads = 128;
constexpr int kFwdMaxVpt = 4;

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The column-stationary forward (norm_cuda_forward_columns.cuh) is opt-in
// with JAXDNN_NORM_FWD=columns until it has been timed against the v7 kernel
// on a GPU; it takes rows of 256-1024 16-byte vectors with shared parameters.
constexpr int kColumnRows = 4;

// JAXDNN_NORM_FWD=columns (read once) selects the column-stationary forward
// for A/B runs; it was slower than the row kernel on an H200 (2026-11-22).
bool ColumnForwardEnabled() {
  static const bool enabled = EnvSwitch("JAXDNN_NORM_FWD") == "columns";
  return enabled;
}

template <typename T, bool kLayer, bool kResidual>
bool LaunchFwdColumns(const NormFwdArgs& p, cudaStream_t stream) {
  const int64_t nvec = p.shape.dim / Vec16<T>::kElems;
  if (!ColumnForwardEnabled() || p.shape.groups != 1 || nvec < 256 || nvec > 1024) return false;
  auto* kernel = NormFwdColumnKernel<T, kLayer, kResidual, kColumnRows>;
  const int threads = RoundUp32(nvec);
  const int64_t steps = (p.shape.rows + kColumnRows - 1) / kColumnRows;
  int device = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess ||
      per_sm < 1) {
    return false;
  }
  const unsigned grid = unsigned(std::min<int64_t>(steps, int64_t(sms) * per_sm));
  kernel<<<grid, threads, 0, stream>>>(p);
  return true;
}

// The warp-per-row forward (norm_cuda_forward_warprows.cuh) is opt-in with
// JAXDNN_NORM_FWD=warprows (read once) until it has been timed against the v7
// kernel on a GPU; it takes 16-bit rows of up to 1024 16-byte vectors with
// one parameter row, everything else keeps the v7 path.
bool WarpRowsForwardEnabled() {
  static const bool enabled = EnvSwitch("JAXDNN_NORM_FWD") == "warprows";
  return enabled;
}

// JAXDNN_NORM_FWD=shifted (read once): LayerNorm statistics in one pass about
// the row's first element (RowMeanM2Shifted), for an A/B against the two-pass
// v7 statistics: the v7 LayerNorm forward issues ~37% more instructions than
// the RMSNorm one and sits at 82% of copy where RMSNorm reaches 95% (ncu: SM
// 66% busy, issue slots ~70%). Not yet run on a GPU.
bool ShiftedStatsEnabled() {
  static const bool enabled = EnvSwitch("JAXDNN_NORM_FWD") == "shifted";
  return enabled;
}

// For the persistent opt-in kernels: the SM count and how many blocks of
// `kernel` (`threads`, `smem` dynamic bytes) fit on one SM. False, with no CUDA
// error left pending for the fallback's launch check, when a query fails or
// none fits. The dynamic shared-memory limit is a function attribute, not a
// stream operation, so raising it is safe under graph capture; it is raised to
// the device maximum less the kernel's static shared memory (the two together
// must fit the opt-in limit), the same value on every call, so that calls of
// other widths on other host threads cannot lower it between a set and a launch.
template <typename Kernel>
bool ResidentSlots(Kernel* kernel, int threads, size_t smem, int& sms, int& per_sm) {
  int device = 0, optin = 0;
  cudaFuncAttributes attr{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess ||
      cudaFuncGetAttributes(&attr, kernel) != cudaSuccess ||
      smem + attr.sharedSizeBytes > size_t(optin) ||
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           optin - int(attr.sharedSizeBytes)) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) !=
          cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();
    return false;
  }
  return true;
}

template <typename T, bool kLayer, bool kResidual, int kVpl, int kWarpsPerRow>
bool LaunchWarpRows(const NormFwdArgs& p, cudaStream_t stream) {
  using Layout = WarpRowsLayout<kResidual, kVpl, kWarpsPerRow>;
  constexpr int kRowsPerBlock = Layout::kRowsPerBlock;
  auto* kernel = NormFwdWarpRowsKernel<T, kLayer, kResidual, kVpl, kWarpsPerRow>;
  const int threads = 32 * Layout::kBlockWarps;
  const size_t smem = WarpRowsSmemBytes(p.shape.dim, kLayer);
  int sms = 0, per_sm = 0;
  if (!ResidentSlots(kernel, threads, smem, sms, per_sm)) return false;  // v7 path takes it
  const int64_t steps = (p.shape.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const unsigned grid = unsigned(std::min<int64_t>(steps, int64_t(sms) * per_sm));
  kernel<<<grid, threads, smem, stream>>>(p);
  return true;
}

template <typename T, bool kLayer, bool kResidual>
bool LaunchFwdWarpRows(const NormFwdArgs& p, cudaStream_t stream) {
  if constexpr (sizeof(T) != 2) {
    return false;  // float32 rows keep the v7 kernel
  } else {
    if (!WarpRowsForwardEnabled() || p.shape.groups != 1) return false;
    const int64_t nvec = p.shape.dim / Vec16<T>::kElems;
    if (nvec < 1) return false;
    if (nvec <= 128) return LaunchWarpRows<T, kLayer, kResidual, 4, 1>(p, stream);
    if (nvec <= 256) return LaunchWarpRows<T, kLayer, kResidual, 8, 1>(p, stream);
    if (nvec <= 512) return LaunchWarpRows<T, kLayer, kResidual, 16, 1>(p, stream);
    if (nvec <= 1024) return LaunchWarpRows<T, kLayer, kResidual, 16, 2>(p, stream);
    return false;
  }
}

template <typename T, bool kLayer, bool kResidual>
ffi::Error LaunchFwd(const NormFwdArgs& p, cudaStream_t stream) {
  const bool aligned = Aligned16(p.x) && Aligned16(p.y) &&
                       (!kResidual || (Aligned16(p.residual) && Aligned16(p.z)));
  if (aligned && p.shape.dim % Vec16<T>::kElems == 0 &&
      LaunchFwdColumns<T, kLayer, kResidual>(p, stream)) {
    return CheckLaunch("jaxdnn norm forward (columns) launch");
  }
  if (aligned && p.shape.dim % Vec16<T>::kElems == 0 &&
      LaunchFwdWarpRows<T, kLayer, kResidual>(p, stream)) {
    return CheckLaunch("jaxdnn norm forward (warprows) launch");
  }
  const RowLaunch l = ChooseFwdLaunch(p.shape.dim, Vec16<T>::kElems, aligned, kFwdMaxVpt,
                                      kFwdBlockThreads);
  const dim3 block(l.tpr, l.rpc);
  const dim3 grid(unsigned((p.shape.rows + l.rpc - 1) / l.rpc));
  // LayerNorm reads scale and bias with an L1 evict-last hint: on an H200 it
  // took 32768x4096 from 70% to 73% of copy and 8192x8192 from 62% to 67%;
  // RMSNorm (scale only) lost 7% with it, so it keeps the plain read
  // (benchmarks/results/2026-11-22-h200-norms-fwd-ab-*).
  constexpr bool kKeep = kLayer;
  if constexpr (kLayer) {
    if (ShiftedStatsEnabled() && l.vpt == 4) {
      // The 4-vector layout only (rows of 4096-8192 16-bit elements): enough
      // for the A/B, without doubling every instantiation.
      NormFwdVecKernel<T, kLayer, kResidual, 4, kKeep, true><<<grid, block, 0, stream>>>(p);
      return CheckLaunch("jaxdnn norm forward (shifted) launch");
    }
  }
  switch (l.vpt) {
    case 1: NormFwdVecKernel<T, kLayer, kResidual, 1, kKeep><<<grid, block, 0, stream>>>(p); break;
    case 2: NormFwdVecKernel<T, kLayer, kResidual, 2, kKeep><<<grid, block, 0, stream>>>(p); break;
    case 4: NormFwdVecKernel<T, kLayer, kResidual, 4, kKeep><<<grid, block, 0, stream>>>(p); break;
    case 8: NormFwdVecKernel<T, kLayer, kResidual, 8, kKeep><<<grid, block, 0, stream>>>(p); break;
    default: NormFwdScalarKernel<T, kLayer, kResidual><<<grid, block, 0, stream>>>(p); break;
  }
  return CheckLaunch("jaxdnn norm forward launch");
}

// Three ring stages (two rows in flight per slot) while that leaves room
// for two blocks per SM, else two.
constexpr size_t kBwdThreeStageSmem = 110 * 1024;
constexpr size_t kMaxSmem = 227 * 1024;

template <typename T, bool kLayer, bool kResidual, int kVpt>
bool LaunchBwdVec(const RowLaunch& l, cudaStream_t stream, const NormBwdArgs& p, BwdGrid bg) {
  const dim3 block(l.tpr, l.rpc);
  const dim3 grid(unsigned(p.num_partials), unsigned(p.shape.groups));
  const size_t smem3 = BwdRingSmemBytes(3, l.tpr, l.rpc, kVpt, p.shape.dim);
  const size_t smem2 = BwdRingSmemBytes(2, l.tpr, l.rpc, kVpt, p.shape.dim);
  // The dynamic shared-memory limit is a function attribute, not a stream
  // operation, so raising it is safe under graph capture.
  if (smem3 <= kBwdThreeStageSmem) {
    auto* kernel = NormBwdRingKernel<T, kLayer, kResidual, kVpt, 3>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem3));
    kernel<<<grid, block, smem3, stream>>>(p, bg);
  } else if (smem2 <= kMaxSmem) {
    auto* kernel = NormBwdRingKernel<T, kLayer, kResidual, kVpt, 2>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem2));
    kernel<<<grid, block, smem2, stream>>>(p, bg);
  } else {
    return false;
  }
  return true;
}

// JAXDNN_NORM_BWD=smem (read once) selects the shared-memory-partials
// backward (norm_cuda_backward_smem.cuh) for A/B runs until it has been
// timed against the ring kernel on a GPU.
bool SmemBackwardEnabled() {
  static const bool enabled = EnvSwitch("JAXDNN_NORM_BWD") == "smem";
  return enabled;
}

// Launches the shared-memory backward for 2-byte rows it covers. Its
// persistent grid is one block per resident slot, capped by the workspace's
// partial rows, so `partials_used` <= p.num_partials: it writes the first
// [groups, partials_used, 2, dim] floats of the workspace.
template <typename T, bool kLayer, bool kResidual>
bool LaunchBwdSmemHalf(const NormBwdArgs& p, cudaStream_t stream, int64_t& partials_used) {
  auto* kernel = NormBwdSmemKernel<T, kLayer, kResidual, 1, kBwdSmemRows>;
  const int threads = RoundUp32(p.shape.dim / Vec16<T>::kElems);
  const size_t smem = BwdSmemBytes(kLayer, p.shape.dim);
  int sms = 0, per_sm = 0;
  if (!ResidentSlots(kernel, threads, smem, sms, per_sm)) return false;  // the ring takes it
  NormBwdArgs q = p;
  const int64_t slots_per_group = std::max<int64_t>(1, int64_t(sms) * per_sm / p.shape.groups);
  q.num_partials = std::min(p.num_partials, slots_per_group);
  const dim3 grid(unsigned(q.num_partials), unsigned(p.shape.groups));
  kernel<<<grid, threads, smem, stream>>>(q);
  partials_used = q.num_partials;
  return true;
}

// True when the opt-in backward took the call; float32 rows stay on the ring
// (and compile no copy of the kernel).
template <typename T, bool kLayer, bool kResidual>
bool LaunchBwdSmem(const NormBwdArgs& p, bool aligned, cudaStream_t stream,
                   int64_t& partials_used) {
  if (!SmemBackwardEnabled() || !aligned || !BwdSmemCovers<T>(p.shape.dim)) return false;
  if constexpr (sizeof(T) == 2) {
    return LaunchBwdSmemHalf<T, kLayer, kResidual>(p, stream, partials_used);
  }
  return false;
}

template <typename T, bool kLayer, bool kResidual>
ffi::Error LaunchBwd(const NormBwdArgs& p, cudaStream_t stream) {
  const bool aligned = Aligned16(p.dy) && Aligned16(p.z) && Aligned16(p.dx) &&
                       (!kResidual || Aligned16(p.dsum));
  NormBwdArgs reduce = p;  // the reduction reads as many partial rows as were written
  if (!LaunchBwdSmem<T, kLayer, kResidual>(p, aligned, stream, reduce.num_partials)) {
    RowLaunch l = ChooseBwdLaunch(p.shape.dim, Vec16<T>::kElems, aligned);
    const int64_t rpg = p.shape.rows_per_group();
    const BwdGrid bg{(rpg + p.num_partials - 1) / p.num_partials};
    bool launched = false;
    switch (l.vpt) {
      case 1: launched = LaunchBwdVec<T, kLayer, kResidual, 1>(l, stream, p, bg); break;
      case 2: launched = LaunchBwdVec<T, kLayer, kResidual, 2>(l, stream, p, bg); break;
      case 4: launched = LaunchBwdVec<T, kLayer, kResidual, 4>(l, stream, p, bg); break;
      default: break;
    }
    if (!launched) {
      l = ScalarLaunch(p.shape.dim);
      const dim3 grid(unsigned(p.num_partials), unsigned(p.shape.groups));
      NormBwdScalarKernel<T, kLayer, kResidual><<<grid, dim3(l.tpr, l.rpc), 0, stream>>>(p, bg);
    }
  }
  if (auto e = CheckLaunch("jaxdnn norm backward launch"); e.failure()) return e;
  const dim3 rblock(32, kReduceWarps);
  const dim3 rgrid(unsigned((p.shape.dim + 31) / 32), unsigned(p.shape.groups));
  NormReducePartialsKernel<kLayer><<<rgrid, rblock, 0, stream>>>(reduce);
  return CheckLaunch("jaxdnn norm backward reduction launch");
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

}  // namespace

ffi::Error NormFwdCuda(const NormFwdArgs& p, cudaStream_t stream) {
  if (p.shape.rows == 0) return ffi::Error::Success();
  switch (p.dtype) {
    case ffi::DataType::F32: return FwdTyped<float>(p, stream);
    case ffi::DataType::BF16: return FwdTyped<__nv_bfloat16>(p, stream);
    case ffi::DataType::F16: return FwdTyped<__half>(p, stream);
    default: return InvalidArg("jaxdnn norm", "unsupported dtype");
  }
}

ffi::Error NormBwdCuda(const NormBwdArgs& p, cudaStream_t stream) {
  if (p.shape.rows == 0) {
    // No rows: the parameter gradients are zero; nothing else to do.
    const size_t bytes = size_t(p.shape.groups * p.shape.dim) * sizeof(float);
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
