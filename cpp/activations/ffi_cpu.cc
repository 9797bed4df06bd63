// XLA FFI handlers for the CPU activations family: decode the call frame, run the kernel.
#include "activations/cpu/activation_kernels.h"
#include "activations/ffi.h"
#include "common/ffi_registry.h"

namespace jaxdnn::activations {
namespace {

ffi::Error BiasActFwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                      float param, int32_t has_bias) {
  auto p = ReadBiasActFwdCall(args, rets, act, param, has_bias != 0);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn bias_act forward", [&] { return BiasActFwdCpu(*p, &pool); });
}

ffi::Error BiasActBwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                      float param, int32_t has_bias) {
  auto p = ReadBiasActBwdCall(args, rets, act, param, has_bias != 0, /*with_workspace=*/false);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn bias_act backward", [&] { return BiasActBwdCpu(*p, &pool); });
}

ffi::Error GluFwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                  float param, int32_t split) {
  auto p = ReadGluFwdCall(args, rets, act, param, split != 0);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn glu forward", [&] { return GluFwdCpu(*p, &pool); });
}

ffi::Error GluBwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                  float param, int32_t split) {
  auto p = ReadGluBwdCall(args, rets, act, param, split != 0);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn glu backward", [&] { return GluBwdCpu(*p, &pool); });
}

}  // namespace

#define JAXDNN_ACT_BIND(flag) \
  ffi::Ffi::Bind()            \
      .Ctx<ffi::ThreadPool>() \
      .RemainingArgs()        \
      .RemainingRets()        \
      .Attr<int32_t>("act")   \
      .Attr<float>("param")   \
      .Attr<int32_t>(flag)

XLA_FFI_DEFINE_HANDLER_SYMBOL(kBiasActFwdCpu, BiasActFwd, JAXDNN_ACT_BIND("has_bias"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kBiasActBwdCpu, BiasActBwd, JAXDNN_ACT_BIND("has_bias"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kGluFwdCpu, GluFwd, JAXDNN_ACT_BIND("split"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kGluBwdCpu, GluBwd, JAXDNN_ACT_BIND("split"));

FamilyExports CpuExports() {
  return {{{"jaxdnn_bias_act_fwd", kBiasActFwdCpu},
           {"jaxdnn_bias_act_bwd", kBiasActBwdCpu},
           {"jaxdnn_glu_fwd", kGluFwdCpu},
           {"jaxdnn_glu_bwd", kGluBwdCpu}},
          {}};
}

}  // namespace jaxdnn::activations
