// Launch selection for the CUDA norms: dtype, kind, fused residual and the
// row layout (norm_cuda_config.h) pick one kernel instantiation.
#include "norms/norm_cuda_kernels.h"

#include <cstdint>

#include "common/cuda_check.h"
#include "common/cuda_vec.cuh"
#include "norms/norm_cuda_backward.cuh"
#include "norms/norm_cuda_config.h"
#include "norms/norm_cuda_forward.cuh"

namespace jaxdnn::norms {
namespace {

constexpr int kFwdBlockThreads = 128;
constexpr int kFwdMaxVpt = 4;
constexpr int kBwdBlockThreads = 256;

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T, bool kLayer, bool kResidual>
ffi::Error LaunchFwd(const NormFwdArgs& p, cudaStream_t stream) {
  const bool aligned = Aligned16(p.x) && Aligned16(p.y) &&
                       (!kResidual || (Aligned16(p.residual) && Aligned16(p.z)));
  const RowLaunch l = ChooseFwdLaunch(p.shape.dim, Vec16<T>::kElems, aligned, kFwdMaxVpt,
                                      kFwdBlockThreads);
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

template <typename T, bool kLayer, bool kResidual, int kVpt>
void LaunchBwdVec(dim3 grid, dim3 block, cudaStream_t stream, const NormBwdArgs& p, BwdGrid bg) {
  auto* kernel = NormBwdVecKernel<T, kLayer, kResidual, kVpt>;
  const size_t smem = BwdSmemBytes(block.y, p.shape.dim);
  // Near or past 48 KB of dynamic shared memory the limit must be raised: a
  // function attribute, not a stream operation, so it is safe under capture.
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  kernel<<<grid, block, smem, stream>>>(p, bg);
}

template <typename T, bool kLayer, bool kResidual>
ffi::Error LaunchBwd(const NormBwdArgs& p, cudaStream_t stream) {
  const bool aligned = Aligned16(p.dy) && Aligned16(p.z) && Aligned16(p.dx) &&
                       (!kResidual || Aligned16(p.dsum));
  const RowLaunch l = ChooseBwdLaunch(p.shape.dim, Vec16<T>::kElems, aligned, kBwdBlockThreads);
  const int64_t rpg = p.shape.rows_per_group();
  const BwdGrid bg{(rpg + p.num_partials - 1) / p.num_partials};
  const dim3 block(l.tpr, l.rpc);
  const dim3 grid(unsigned(p.num_partials), unsigned(p.shape.groups));
  switch (l.vpt) {
    case 1: LaunchBwdVec<T, kLayer, kResidual, 1>(grid, block, stream, p, bg); break;
    case 2: LaunchBwdVec<T, kLayer, kResidual, 2>(grid, block, stream, p, bg); break;
    case 4: LaunchBwdVec<T, kLayer, kResidual, 4>(grid, block, stream, p, bg); break;
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
