// Instantiates the CUDA attention kernels for each dtype and head dim and
// launches them on XLA's stream.
#include "attention/attention_cuda_kernels.h"

#include "attention/attention_cuda_forward.cuh"

namespace jaxdnn::attention {
namespace {

template <typename T, int kD>
cudaError_t LaunchFwd(const AttnFwdArgs& p, cudaStream_t stream) {
  constexpr int kSmem = FwdSmemBytes<kD>();
  // Opting in to more than 48 KB of dynamic shared memory is a per-function
  // attribute: set once, not a stream operation (safe under graph capture).
  static const cudaError_t configured = cudaFuncSetAttribute(
      AttentionFwdKernel<T, kD>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (configured != cudaSuccess) return configured;
  const dim3 grid(unsigned((p.shape.q_len + kFwdBlockM - 1) / kFwdBlockM), unsigned(p.shape.heads),
                  unsigned(p.shape.batch));
  AttentionFwdKernel<T, kD><<<grid, kFwdThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t FwdByHeadDim(const AttnFwdArgs& p, cudaStream_t stream) {
  switch (p.shape.head_dim) {
    case 64: return LaunchFwd<T, 64>(p, stream);
    case 128: return LaunchFwd<T, 128>(p, stream);
    case 256: return LaunchFwd<T, 256>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t AttentionFwdCuda(const AttnFwdArgs& p, cudaStream_t stream) {
  if (p.shape.batch == 0 || p.shape.q_len == 0 || p.shape.heads == 0) return cudaSuccess;
  switch (p.dtype) {
    case ffi::DataType::BF16: return FwdByHeadDim<__nv_bfloat16>(p, stream);
    case ffi::DataType::F16: return FwdByHeadDim<__half>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace jaxdnn::attention
