// XLA FFI handlers for the CUDA CNN norms: the stream comes from XLA, nothing
// synchronizes or allocates, so the handlers run inside XLA's command
// buffers. The column sums take their partials from XLA workspaces sized by
// the plan queries below.
#include <cuda_runtime_api.h>

#include <string>

#include "cnn_norms/ffi.h"
#include "cnn_norms/sm80/batch_norm_launch.h"
#include "cnn_norms/sm80/group_norm_launch.h"
#include "common/cuda_check.h"
#include "common/ffi_registry.h"

namespace jaxdnn::cnn_norms {
namespace {

template <BatchNormStep kStep>
ffi::Error BatchNorm(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                     float param, int32_t residual, int32_t training, float epsilon, float momentum,
                     int32_t mask) {
  const BatchNormAttrs attrs{act, param, residual != 0, training != 0, epsilon, momentum, mask != 0};
  const bool sums = kStep == BatchNormStep::kStats || kStep == BatchNormStep::kBwdReduce;
  auto p = ReadBatchNormCall(args, rets, kStep, attrs, /*with_workspace=*/sums);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  const LaunchStatus s = BatchNormCuda(kStep, *p, stream);
  if (s.ok()) return ffi::Error::Success();
  return ffi::Error::Internal("jaxdnn batch_norm (" + std::to_string(p->shape.rows) + " rows x " +
                              std::to_string(p->shape.channels) + " channels): " + s.Text());
}

ffi::Error Failed(const LaunchStatus& s, const GroupShape& shape, const char* what) {
  if (s.ok()) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + " (" + std::to_string(shape.samples) + " samples x " +
                              std::to_string(shape.positions) + " positions x " +
                              std::to_string(shape.channels) + " channels): " + s.Text());
}

ffi::Error GnFwd(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t channels,
                 int64_t groups, float epsilon, int32_t act, float param, int32_t residual) {
  const GroupNormAttrs attrs{groups, epsilon, act, param, residual != 0};
  auto p = ReadGroupNormFwdCall(args, rets, channels, attrs, /*with_workspace=*/true);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Failed(GroupNormFwdCuda(*p, p->workspace, p->workspace_elems, stream), p->shape,
                "jaxdnn group_norm forward");
}

ffi::Error GnBwd(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t channels,
                 int64_t groups, float epsilon, int32_t act, float param, int32_t residual) {
  const GroupNormAttrs attrs{groups, epsilon, act, param, residual != 0};
  auto p = ReadGroupNormBwdCall(args, rets, channels, attrs, /*with_workspace=*/true);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Failed(GroupNormBwdCuda(*p, p->workspace, p->workspace_elems, stream), p->shape,
                "jaxdnn group_norm backward");
}

// The group norm's workspace in float32 elements (both directions' size).
int64_t GnWorkspaceElems(const QueryArgs& a) {
  GroupShape s;
  s.samples = QueryArg(a, "samples");
  s.positions = QueryArg(a, "positions");
  s.channels = QueryArg(a, "channels");
  s.groups = QueryArg(a, "groups");
  const GnWorkspace w = GroupNormWorkspace(s, QueryArg(a, "itemsize"));
  return w.partials + w.group_sums;
}

int64_t Partials(const QueryArgs& a) {
  return BatchNormPartials(QueryArg(a, "rows"), QueryArg(a, "channels"), QueryArg(a, "itemsize"));
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kBatchNormStatsCuda, BatchNorm<BatchNormStep::kStats>,
                              JAXDNN_BN_BIND(ffi::PlatformStream<cudaStream_t>),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kBatchNormApplyCuda, BatchNorm<BatchNormStep::kApply>,
                              JAXDNN_BN_BIND(ffi::PlatformStream<cudaStream_t>),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kBatchNormBwdReduceCuda, BatchNorm<BatchNormStep::kBwdReduce>,
                              JAXDNN_BN_BIND(ffi::PlatformStream<cudaStream_t>),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kBatchNormBwdApplyCuda, BatchNorm<BatchNormStep::kBwdApply>,
                              JAXDNN_BN_BIND(ffi::PlatformStream<cudaStream_t>),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(kGroupNormFwdCuda, GnFwd, JAXDNN_GN_BIND(ffi::PlatformStream<cudaStream_t>),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kGroupNormBwdCuda, GnBwd, JAXDNN_GN_BIND(ffi::PlatformStream<cudaStream_t>),
                              {ffi::Traits::kCmdBufferCompatible});

FamilyExports CudaExports() {
  return {{{"jaxdnn_group_norm_fwd", kGroupNormFwdCuda},
           {"jaxdnn_group_norm_bwd", kGroupNormBwdCuda},
           {"jaxdnn_batch_norm_stats", kBatchNormStatsCuda},
           {"jaxdnn_batch_norm_apply", kBatchNormApplyCuda},
           {"jaxdnn_batch_norm_bwd_reduce", kBatchNormBwdReduceCuda},
           {"jaxdnn_batch_norm_bwd_apply", kBatchNormBwdApplyCuda}},
          {{"batch_norm_partials", Partials}, {"group_norm_workspace", GnWorkspaceElems}}};
}

}  // namespace jaxdnn::cnn_norms
