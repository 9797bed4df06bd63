// XLA FFI handlers for the CPU softmax family: decode the call frame, run the kernel.
#include "common/ffi_registry.h"
#include "softmax/cpu/softmax_kernels.h"
#include "softmax/ffi.h"

namespace jaxdnn::softmax {
namespace {

ffi::Error FwdCpu(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t log,
                  int32_t masked) {
  auto p = ReadFwdCall(args, rets, log != 0, masked != 0);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn softmax forward", [&] { return SoftmaxFwdCpu(*p, &pool); });
}

ffi::Error BwdCpu(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t log,
                  int32_t masked) {
  auto p = ReadBwdCall(args, rets, log != 0, masked != 0);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn softmax backward", [&] { return SoftmaxBwdCpu(*p, &pool); });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kSoftmaxFwdCpu, FwdCpu,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int32_t>("log")
                                  .Attr<int32_t>("masked"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(kSoftmaxBwdCpu, BwdCpu,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int32_t>("log")
                                  .Attr<int32_t>("masked"));

FamilyExports CpuExports() {
  return {{{"jaxdnn_softmax_fwd", kSoftmaxFwdCpu}, {"jaxdnn_softmax_bwd", kSoftmaxBwdCpu}}, {}};
}

}  // namespace jaxdnn::softmax
