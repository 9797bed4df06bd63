// XLA FFI handlers for the CUDA softmax family: the stream comes from XLA,
// nothing synchronizes or allocates, so the handlers run inside XLA's
// command buffers. No workspace, so no plan query.
#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#include "common/ffi_registry.h"
#include "softmax/ffi.h"
#include "softmax/sm80/cross_entropy_launch.h"
#include "softmax/sm80/softmax_launch.h"

namespace jaxdnn::softmax {
namespace {

std::string ShapeText(const SoftmaxShape& s) {
  return std::to_string(s.rows) + " rows x " + std::to_string(s.cols) + " cols";
}

template <typename Args>
ffi::Error Launched(cudaError_t err, const Args& p, const char* what) {
  if (err == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + " launch (" + ShapeText(p.shape) +
                              "): " + cudaGetErrorString(err));
}

ffi::Error FwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t log,
                   int32_t masked) {
  auto p = ReadFwdCall(args, rets, log != 0, masked != 0);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Launched(SoftmaxFwdCuda(*p, stream), *p, "jaxdnn softmax forward");
}

ffi::Error BwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t log,
                   int32_t masked) {
  auto p = ReadBwdCall(args, rets, log != 0, masked != 0);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Launched(SoftmaxBwdCuda(*p, stream), *p, "jaxdnn softmax backward");
}

ffi::Error CeFwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, float smoothing,
                     float z_loss, int32_t has_ignore, int32_t ignore_index) {
  auto p = ReadCrossEntropyFwdCall(args, rets, {smoothing, z_loss, has_ignore != 0, ignore_index});
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Launched(CrossEntropyFwdCuda(*p, stream), *p, "jaxdnn cross-entropy forward");
}

ffi::Error CeBwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, float smoothing,
                     float z_loss, int32_t has_ignore, int32_t ignore_index) {
  auto p = ReadCrossEntropyBwdCall(args, rets, {smoothing, z_loss, has_ignore != 0, ignore_index});
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Launched(CrossEntropyBwdCuda(*p, stream), *p, "jaxdnn cross-entropy backward");
}

ffi::Error SoftCeFwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                         float smoothing, float z_loss) {
  auto p = ReadSoftCrossEntropyFwdCall(args, rets, smoothing, z_loss);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Launched(SoftCrossEntropyFwdCuda(*p, stream), *p, "jaxdnn soft cross-entropy forward");
}

ffi::Error SoftCeBwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                         float smoothing) {
  auto p = ReadSoftCrossEntropyBwdCall(args, rets, smoothing);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Launched(SoftCrossEntropyBwdCuda(*p, stream), *p, "jaxdnn soft cross-entropy backward");
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

#define JAXDNN_CE_ATTRS            \
  .Attr<float>("label_smoothing")  \
      .Attr<float>("z_loss")       \
      .Attr<int32_t>("has_ignore") \
      .Attr<int32_t>("ignore_index")

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    kCrossEntropyFwdCuda, CeFwdCuda,
    ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().RemainingArgs().RemainingRets() JAXDNN_CE_ATTRS,
    {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    kCrossEntropyBwdCuda, CeBwdCuda,
    ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().RemainingArgs().RemainingRets() JAXDNN_CE_ATTRS,
    {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(kSoftCrossEntropyFwdCuda, SoftCeFwdCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<float>("label_smoothing")
                                  .Attr<float>("z_loss"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    kSoftCrossEntropyBwdCuda, SoftCeBwdCuda,
    ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().RemainingArgs().RemainingRets().Attr<float>(
        "label_smoothing"),
    {ffi::Traits::kCmdBufferCompatible});

FamilyExports CudaExports() {
  return {{{"jaxdnn_softmax_fwd", kSoftmaxFwdCuda},
           {"jaxdnn_softmax_bwd", kSoftmaxBwdCuda},
           {"jaxdnn_cross_entropy_fwd", kCrossEntropyFwdCuda},
           {"jaxdnn_cross_entropy_bwd", kCrossEntropyBwdCuda},
           {"jaxdnn_soft_cross_entropy_fwd", kSoftCrossEntropyFwdCuda},
           {"jaxdnn_soft_cross_entropy_bwd", kSoftCrossEntropyBwdCuda}},
          {}};
}

}  // namespace jaxdnn::softmax
