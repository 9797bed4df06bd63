// XLA FFI handlers for the CUDA softmax family: the stream comes from XLA,
// nothing synchronizes or allocates, so the handlers run inside XLA's
// command buffers. No workspace, so no plan query.
#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#include "common/ffi_registry.h"
#include "softmax/ffi.h"
#include "softmax/sm80/softmax_launch.h"

namespace jaxdnn::softmax {
namespace {

std::string ShapeText(const SoftmaxShape& s) {
  return std::to_string(s.rows) + " rows x " + std::to_string(s.cols) + " cols";
}

ffi::Error FwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t log,
                   int32_t masked) {
  auto p = ReadFwdCall(args, rets, log != 0, masked != 0);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  const cudaError_t err = SoftmaxFwdCuda(*p, stream);
  if (err != cudaSuccess) {
    return ffi::Error::Internal(std::string("jaxdnn softmax forward launch (") + ShapeText(p->shape) +
                                "): " + cudaGetErrorString(err));
  }
  return ffi::Error::Success();
}

ffi::Error BwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t log,
                   int32_t masked) {
  auto p = ReadBwdCall(args, rets, log != 0, masked != 0);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  const cudaError_t err = SoftmaxBwdCuda(*p, stream);
  if (err != cudaSuccess) {
    return ffi::Error::Internal(std::string("jaxdnn softmax backward launch (") + ShapeText(p->shape) +
                                "): " + cudaGetErrorString(err));
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kSoftmaxFwdCuda, FwdCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int32_t>("log")
                                  .Attr<int32_t>("masked"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(kSoftmaxBwdCuda, BwdCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int32_t>("log")
                                  .Attr<int32_t>("masked"),
                              {ffi::Traits::kCmdBufferCompatible});

FamilyExports CudaExports() {
  return {{{"jaxdnn_softmax_fwd", kSoftmaxFwdCuda}, {"jaxdnn_softmax_bwd", kSoftmaxBwdCuda}}, {}};
}

}  // namespace jaxdnn::softmax
