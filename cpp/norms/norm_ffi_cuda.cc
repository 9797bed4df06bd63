// XLA FFI handlers for the CUDA norms: the stream comes from XLA, the
// backward's workspace is an extra result that XLA allocates, nothing
// synchronizes, so the handlers run inside XLA's command buffers.
#include <cuda_runtime_api.h>

#include "norms/norm_cuda_kernels.h"
#include "norms/norm_ffi.h"

namespace jaxdnn::norms {
namespace {

ffi::Error FwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   int32_t kind, int32_t residual, float epsilon) {
  auto p = DecodeFwd(args, rets, kind, residual != 0, epsilon);
  if (!p.has_value()) return p.error();
  return NormFwdCuda(*p, stream);
}

ffi::Error BwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   int32_t kind, int32_t residual) {
  auto p = DecodeBwd(args, rets, kind, residual != 0, /*has_workspace=*/true);
  if (!p.has_value()) return p.error();
  return NormBwdCuda(*p, stream);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kNormFwdCuda, FwdCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int32_t>("kind")
                                  .Attr<int32_t>("residual")
                                  .Attr<float>("epsilon"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(kNormBwdCuda, BwdCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int32_t>("kind")
                                  .Attr<int32_t>("residual"),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxdnn::norms
