// XLA FFI handlers for the CUDA CNN norms: the stream comes from XLA, nothing
// synchronizes or allocates, so the handlers run inside XLA's command
// buffers. BatchNorm's column sums take their partials from an XLA
// workspace sized by the plan query below. The group norm has no CUDA
// kernel yet (Python serves a GPU call with the XLA composition).
#include <cuda_runtime_api.h>

#include <string>

#include "cnn_norms/ffi.h"
#include "cnn_norms/sm80/batch_norm_launch.h"
#include "common/cuda_check.h"
#include "common/ffi_registry.h"

namespace jaxdnn::cnn_norms {
namespace {

template <BatchNormStep kStep>
ffi::Error BatchNorm(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                     float param, int32_t residual, int32_t training, float epsilon, float momentum) {
  const BatchNormAttrs attrs{act, param, residual != 0, training != 0, epsilon, momentum};
  const bool sums = kStep == BatchNormStep::kStats || kStep == BatchNormStep::kBwdReduce;
  auto p = ReadBatchNormCall(args, rets, kStep, attrs, /*with_workspace=*/sums);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  const LaunchStatus s = BatchNormCuda(kStep, *p, stream);
  if (s.ok()) return ffi::Error::Success();
  return ffi::Error::Internal("jaxdnn batch_norm (" + std::to_string(p->shape.rows) + " rows x " +
                              std::to_string(p->shape.channels) + " channels): " + s.Text());
}

int64_t Partials(const QueryArgs& a) {
  return BatchNormPartials(QueryArg(a, "rows"), QueryArg(a, "channels"), QueryArg(a, "itemsize"));
}

}  // namespace

#define JAXDNN_BN_BIND                          \
  ffi::Ffi::Bind()                              \
      .Ctx<ffi::PlatformStream<cudaStream_t>>() \
      .RemainingArgs()                          \
      .RemainingRets()                          \
      .Attr<int32_t>("act")                     \
      .Attr<float>("param")                     \
      .Attr<int32_t>("residual")                \
      .Attr<int32_t>("training")                \
      .Attr<float>("epsilon")                   \
      .Attr<float>("momentum")

XLA_FFI_DEFINE_HANDLER_SYMBOL(kBatchNormStatsCuda, BatchNorm<BatchNormStep::kStats>, JAXDNN_BN_BIND,
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kBatchNormApplyCuda, BatchNorm<BatchNormStep::kApply>, JAXDNN_BN_BIND,
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kBatchNormBwdReduceCuda, BatchNorm<BatchNormStep::kBwdReduce>, JAXDNN_BN_BIND,
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kBatchNormBwdApplyCuda, BatchNorm<BatchNormStep::kBwdApply>, JAXDNN_BN_BIND,
                              {ffi::Traits::kCmdBufferCompatible});

FamilyExports CudaExports() {
  return {{{"jaxdnn_batch_norm_stats", kBatchNormStatsCuda},
           {"jaxdnn_batch_norm_apply", kBatchNormApplyCuda},
           {"jaxdnn_batch_norm_bwd_reduce", kBatchNormBwdReduceCuda},
           {"jaxdnn_batch_norm_bwd_apply", kBatchNormBwdApplyCuda}},
          {{"batch_norm_partials", Partials}}};
}

}  // namespace jaxdnn::cnn_norms
