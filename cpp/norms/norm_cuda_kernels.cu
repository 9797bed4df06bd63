// Launch selection for the CUDA norms: dtype, kind, fused residual and the
// row layout (norm_cuda_config.h) pick one kernel instantiation.
#include "norms/norm_cuda_kernels.h"

#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "common/cuda_vec.cuh"
#include "norms/norm_cuda_backward.cuh"
#include "norms/norm_cuda_config.h"
#include "norms/norm_cuda_forward.cuh"

namespace jaxdnn::norms {
namespace {

constexpr int kFwdBlockThreads = 128;
constexpr int kBwdBlockThreads = 256;

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

int SmCount() {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return sms > 0 ? sms : 1;
}

// The persistent bulk-copy forward; false when its ring does not fit.
template <typename T, bool kLayer, bool kResidual, int kVpt>
bool LaunchFwdBulk(const NormFwdArgs& p, int tpr, cudaStream_t stream) {
  constexpr int kOps = kResidual ? 2 : 1;
  constexpr size_t kRingBudget = 96 * 1024;
  const uint32_t row_bytes = uint32_t(p.shape.dim * sizeof(T));
  const size_t stage_bytes = size_t(kOps) * row_bytes;
  const int stages = int(std::min<size_t>(4, std::max<size_t>(2, kRingBudget / stage_bytes)));
  const size_t smem = stages * stage_bytes;
  if (smem > 200 * 1024) return false;
  auto* kernel = NormFwdBulkKernel<T, kLayer, kResidual, kVpt>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  int per_sm = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, tpr, smem);
  const int64_t blocks = std::min<int64_t>(p.shape.rows, int64_t(SmCount()) * std::max(per_sm, 1));
  kernel<<<unsigned(blocks), dim3(tpr, 1), smem, stream>>>(p, FwdRing{stages, row_bytes});
  return true;
}

template <typename T, bool kLayer, bool kResidual>
ffi::Error LaunchFwd(const NormFwdArgs& p, cudaStream_t stream) {
  const bool aligned = Aligned16(p.x) && Aligned16(p.y) &&
                       (!kResidual || (Aligned16(p.residual) && Aligned16(p.z)));
  static const int max_vpt = EnvInt("JAXDNN_NORM_FWD_MAX_VPT", 4);
  static const int block_threads = EnvInt("JAXDNN_NORM_FWD_BLOCK", kFwdBlockThreads);
  const RowLaunch l = ChooseFwdLaunch(p.shape.dim, Vec16<T>::kElems, aligned, max_vpt, block_threads);
  static const bool bulk = EnvInt("JAXDNN_NORM_FWD_BULK", 1) != 0;
  if (bulk && l.vpt != 0) {
    bool done = false;
    switch (l.vpt) {
      case 1: done = LaunchFwdBulk<T, kLayer, kResidual, 1>(p, l.tpr, stream); break;
      case 2: done = LaunchFwdBulk<T, kLayer, kResidual, 2>(p, l.tpr, stream); break;
      case 4: done = LaunchFwdBulk<T, kLayer, kResidual, 4>(p, l.tpr, stream); break;
      case 8: done = LaunchFwdBulk<T, kLayer, kResidual, 8>(p, l.tpr, stream); break;
    }
    if (done) return CheckLaunch("jaxdnn norm forward launch");
  }
  const dim3 block(l.tpr, l.rpc);
  const dim3 grid(unsigned((p.shape.rows + l.rpc - 1) / l.rpc));
  switch (l.vpt) {
    case 1: NormFwdVecKernel<T, kLayer, kResidual, 1><<<grid, block, 0, stream>>>(p); break;
    case 2: NormFwdVecKernel<T, kLayer, kResidual, 2><<<grid, block, 0, stream>>>(p); break;
    case 4: NormFwdVecKernel<T, kLayer, kResidual, 4><<<grid, block, 0, stream>>>(p); break;
    case 8: NormFwdVecKernel<T, kLayer, kResidual, 8><<<grid, block, 0, stream>>>(p); break;
    default: NormFwdScalarKernel<T, kLayer, kResidual><<<grid, block, 0, stream>>>(p); break;
  }
  return CheckLaunch("jaxdnn norm forward launch");
}

template <typename T, bool kLayer, bool kResidual, int kVpt, int kStages>
void LaunchBwdVecStages(dim3 grid, dim3 block, cudaStream_t stream, const NormBwdArgs& p,
                        BwdGrid bg) {
  auto* kernel = NormBwdVecKernel<T, kLayer, kResidual, kVpt, kStages>;
  const size_t smem = BwdSmemBytes(kStages, kVpt, block.x, block.y, p.shape.dim);
  // Past 48 KB of dynamic shared memory the limit must be raised: a function
  // attribute, not a stream operation, so it is safe under graph capture.
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  kernel<<<grid, block, smem, stream>>>(p, bg);
}

template <typename T, bool kLayer, bool kResidual, int kVpt>
void LaunchBwdVec(int stages, dim3 grid, dim3 block, cudaStream_t stream, const NormBwdArgs& p,
                  BwdGrid bg) {
  switch (stages) {
    case 2: LaunchBwdVecStages<T, kLayer, kResidual, kVpt, 2>(grid, block, stream, p, bg); break;
    case 3: LaunchBwdVecStages<T, kLayer, kResidual, kVpt, 3>(grid, block, stream, p, bg); break;
    default: LaunchBwdVecStages<T, kLayer, kResidual, kVpt, 0>(grid, block, stream, p, bg); break;
  }
}

template <typename T, bool kLayer, bool kResidual>
ffi::Error LaunchBwd(const NormBwdArgs& p, cudaStream_t stream) {
  const bool aligned = Aligned16(p.dy) && Aligned16(p.z) && Aligned16(p.dx) &&
                       (!kResidual || Aligned16(p.dsum));
  static const int stages = EnvInt("JAXDNN_NORM_BWD_STAGES", 0);
  const RowLaunch l = ChooseBwdLaunch(p.shape.dim, Vec16<T>::kElems, aligned, kBwdBlockThreads);
  const int64_t rpg = p.shape.rows_per_group();
  const BwdGrid bg{(rpg + p.num_partials - 1) / p.num_partials};
  const dim3 block(l.tpr, l.rpc);
  const dim3 grid(unsigned(p.num_partials), unsigned(p.shape.groups));
  switch (l.vpt) {
    case 1: LaunchBwdVec<T, kLayer, kResidual, 1>(stages, grid, block, stream, p, bg); break;
    case 2: LaunchBwdVec<T, kLayer, kResidual, 2>(stages, grid, block, stream, p, bg); break;
    case 4: LaunchBwdVec<T, kLayer, kResidual, 4>(stages, grid, block, stream, p, bg); break;
    default: NormBwdScalarKernel<T, kLayer, kResidual><<<grid, block, 0, stream>>>(p, bg); break;
  }
  if (auto e = CheckLaunch("jaxdnn norm backward launch"); e.failure()) return e;
  const dim3 rblock(256);
  const dim3 rgrid(unsigned((p.shape.dim + 255) / 256), unsigned(p.shape.groups));
  NormReducePartialsKernel<kLayer><<<rgrid, rblock, 0, stream>>>(p);
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
