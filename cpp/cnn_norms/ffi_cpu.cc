// XLA FFI handlers for the CPU CNN norms: decode the call frame, run the kernel.
#include "cnn_norms/cpu/batch_norm_kernels.h"
#include "cnn_norms/cpu/group_norm_kernels.h"
#include "cnn_norms/ffi.h"
#include "common/ffi_registry.h"

namespace jaxdnn::cnn_norms {
namespace {

GroupNormAttrs Attrs(int64_t groups, float epsilon, int32_t act, float param, int32_t residual) {
  return {groups, epsilon, act, param, residual != 0};
}

ffi::Error Fwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t channels,
               int64_t groups, float epsilon, int32_t act, float param, int32_t residual) {
  auto p = ReadGroupNormFwdCall(args, rets, channels, Attrs(groups, epsilon, act, param, residual));
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn group_norm forward", [&] { return GroupNormFwdCpu(*p, &pool); });
}

ffi::Error Bwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t channels,
               int64_t groups, float epsilon, int32_t act, float param, int32_t residual) {
  auto p = ReadGroupNormBwdCall(args, rets, channels, Attrs(groups, epsilon, act, param, residual));
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn group_norm backward", [&] { return GroupNormBwdCpu(*p, &pool); });
}

template <BatchNormStep kStep>
ffi::Error BatchNorm(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                     float param, int32_t residual, int32_t training, float epsilon, float momentum,
                     int32_t mask) {
  const BatchNormAttrs attrs{act, param, residual != 0, training != 0, epsilon, momentum, mask != 0};
  auto p = ReadBatchNormCall(args, rets, kStep, attrs);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn batch_norm", [&] { return BatchNormCpu(kStep, *p, &pool); });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kGroupNormFwdCpu, Fwd, JAXDNN_GN_BIND(ffi::ThreadPool));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kGroupNormBwdCpu, Bwd, JAXDNN_GN_BIND(ffi::ThreadPool));

XLA_FFI_DEFINE_HANDLER_SYMBOL(kBatchNormStatsCpu, BatchNorm<BatchNormStep::kStats>,
                              JAXDNN_BN_BIND(ffi::ThreadPool));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kBatchNormApplyCpu, BatchNorm<BatchNormStep::kApply>,
                              JAXDNN_BN_BIND(ffi::ThreadPool));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kBatchNormBwdReduceCpu, BatchNorm<BatchNormStep::kBwdReduce>,
                              JAXDNN_BN_BIND(ffi::ThreadPool));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kBatchNormBwdApplyCpu, BatchNorm<BatchNormStep::kBwdApply>,
                              JAXDNN_BN_BIND(ffi::ThreadPool));

FamilyExports CpuExports() {
  return {{{"jaxdnn_group_norm_fwd", kGroupNormFwdCpu},
           {"jaxdnn_group_norm_bwd", kGroupNormBwdCpu},
           {"jaxdnn_batch_norm_stats", kBatchNormStatsCpu},
           {"jaxdnn_batch_norm_apply", kBatchNormApplyCpu},
           {"jaxdnn_batch_norm_bwd_reduce", kBatchNormBwdReduceCpu},
           {"jaxdnn_batch_norm_bwd_apply", kBatchNormBwdApplyCpu}},
          {}};
}

}  // namespace jaxdnn::cnn_norms
