// XLA FFI handlers for the CPU norms: decode the call frame, run the kernel.
#include "norms/ffi.h"

#include "common/ffi_registry.h"

#include "norms/cpu/norm_kernels.h"

namespace jaxdnn::norms {
namespace {

ffi::Error FwdCpu(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t kind,
                  int32_t residual, float epsilon) {
  auto p = ReadFwdCall(args, rets, kind, residual != 0, epsilon);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn norm forward", [&] { return NormFwdCpu(*p, &pool); });
}

ffi::Error BwdCpu(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t kind,
                  int32_t residual) {
  auto p = ReadBwdCall(args, rets, kind, residual != 0, /*has_workspace=*/false);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn norm backward", [&] { return NormBwdCpu(*p, &pool); });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kNormFwdCpu, FwdCpu,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int32_t>("kind")
                                  .Attr<int32_t>("residual")
                                  .Attr<float>("epsilon"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(kNormBwdCpu, BwdCpu,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int32_t>("kind")
                                  .Attr<int32_t>("residual"));

FamilyExports CpuExports() {
  return {{{"jaxdnn_norm_fwd", kNormFwdCpu}, {"jaxdnn_norm_bwd", kNormBwdCpu}}, {}};
}

}  // namespace jaxdnn::norms
