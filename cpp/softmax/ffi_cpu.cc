// XLA FFI handlers for the CPU softmax family: decode the call frame, run the kernel.
#include "common/ffi_registry.h"
#include "softmax/cpu/cross_entropy_kernels.h"
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

ffi::Error CeFwdCpu(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, float smoothing,
                    float z_loss, int32_t has_ignore, int32_t ignore_index) {
  auto p = ReadCrossEntropyFwdCall(args, rets, {smoothing, z_loss, has_ignore != 0, ignore_index});
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn cross-entropy forward", [&] { return CrossEntropyFwdCpu(*p, &pool); });
}

ffi::Error CeBwdCpu(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, float smoothing,
                    float z_loss, int32_t has_ignore, int32_t ignore_index) {
  auto p = ReadCrossEntropyBwdCall(args, rets, {smoothing, z_loss, has_ignore != 0, ignore_index});
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn cross-entropy backward", [&] { return CrossEntropyBwdCpu(*p, &pool); });
}

ffi::Error SoftCeFwdCpu(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                        float smoothing, float z_loss) {
  auto p = ReadSoftCrossEntropyFwdCall(args, rets, smoothing, z_loss);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn soft cross-entropy forward", [&] { return SoftCrossEntropyFwdCpu(*p, &pool); });
}

ffi::Error SoftCeBwdCpu(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                        float smoothing) {
  auto p = ReadSoftCrossEntropyBwdCall(args, rets, smoothing);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn soft cross-entropy backward", [&] { return SoftCrossEntropyBwdCpu(*p, &pool); });
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

#define JAXDNN_CE_ATTRS            \
  .Attr<float>("label_smoothing")  \
      .Attr<float>("z_loss")       \
      .Attr<int32_t>("has_ignore") \
      .Attr<int32_t>("ignore_index")

XLA_FFI_DEFINE_HANDLER_SYMBOL(kCrossEntropyFwdCpu, CeFwdCpu,
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().RemainingArgs().RemainingRets()
                                  JAXDNN_CE_ATTRS);

XLA_FFI_DEFINE_HANDLER_SYMBOL(kCrossEntropyBwdCpu, CeBwdCpu,
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().RemainingArgs().RemainingRets()
                                  JAXDNN_CE_ATTRS);

XLA_FFI_DEFINE_HANDLER_SYMBOL(kSoftCrossEntropyFwdCpu, SoftCeFwdCpu,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<float>("label_smoothing")
                                  .Attr<float>("z_loss"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    kSoftCrossEntropyBwdCpu, SoftCeBwdCpu,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().RemainingArgs().RemainingRets().Attr<float>("label_smoothing"));

FamilyExports CpuExports() {
  return {{{"jaxdnn_softmax_fwd", kSoftmaxFwdCpu},
           {"jaxdnn_softmax_bwd", kSoftmaxBwdCpu},
           {"jaxdnn_cross_entropy_fwd", kCrossEntropyFwdCpu},
           {"jaxdnn_cross_entropy_bwd", kCrossEntropyBwdCpu},
           {"jaxdnn_soft_cross_entropy_fwd", kSoftCrossEntropyFwdCpu},
           {"jaxdnn_soft_cross_entropy_bwd", kSoftCrossEntropyBwdCpu}},
          {}};
}

}  // namespace jaxdnn::softmax
