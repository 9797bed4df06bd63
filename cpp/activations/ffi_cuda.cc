// XLA FFI handlers for the CUDA activations family: the stream comes from
// XLA, nothing synchronizes or allocates, so the handlers run inside XLA's
// command buffers. bias_act's backward takes its bias-gradient partials from
// an XLA workspace sized by the plan query below.
#include <cuda_runtime_api.h>

#include <string>

#include "activations/ffi.h"
#include "common/rows_plan.h"
#include "activations/sm80/activation_launch.h"
#include "common/cuda_check.h"
#include "common/ffi_registry.h"

namespace jaxdnn::activations {
namespace {

ffi::Error Launched(const LaunchStatus& s, const Shape& shape, const char* what) {
  if (s.ok()) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + " (" + std::to_string(shape.rows) + " rows x " +
                              std::to_string(shape.cols) + " cols): " + s.Text());
}

ffi::Error BiasActFwd(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                      float param, int32_t has_bias) {
  auto p = ReadBiasActFwdCall(args, rets, act, param, has_bias != 0);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Launched(BiasActFwdCuda(*p, stream), p->shape, "jaxdnn bias_act forward");
}

ffi::Error BiasActBwd(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                      float param, int32_t has_bias) {
  auto p = ReadBiasActBwdCall(args, rets, act, param, has_bias != 0, /*with_workspace=*/true);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Launched(BiasActBwdCuda(*p, stream), p->shape, "jaxdnn bias_act backward");
}

ffi::Error GluFwd(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                  float param, int32_t split) {
  auto p = ReadGluFwdCall(args, rets, act, param, split != 0);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Launched(GluFwdCuda(*p, stream), p->shape, "jaxdnn glu forward");
}

ffi::Error GluBwd(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                  float param, int32_t split) {
  auto p = ReadGluBwdCall(args, rets, act, param, split != 0);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Launched(GluBwdCuda(*p, stream), p->shape, "jaxdnn glu backward");
}

// Rows of float32 partials bias_act's backward writes (its workspace is
// [partials, cols]).
int64_t BiasBwdPartials(const QueryArgs& a) {
  return MakeColumnSumPlan(QueryArg(a, "rows"), QueryArg(a, "cols"), QueryArg(a, "itemsize")).row_blocks;
}

}  // namespace

#define JAXDNN_ACT_BIND(flag)                   \
  ffi::Ffi::Bind()                              \
      .Ctx<ffi::PlatformStream<cudaStream_t>>() \
      .RemainingArgs()                          \
      .RemainingRets()                          \
      .Attr<int32_t>("act")                     \
      .Attr<float>("param")                     \
      .Attr<int32_t>(flag)

XLA_FFI_DEFINE_HANDLER_SYMBOL(kBiasActFwdCuda, BiasActFwd, JAXDNN_ACT_BIND("has_bias"),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kBiasActBwdCuda, BiasActBwd, JAXDNN_ACT_BIND("has_bias"),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kGluFwdCuda, GluFwd, JAXDNN_ACT_BIND("split"),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kGluBwdCuda, GluBwd, JAXDNN_ACT_BIND("split"),
                              {ffi::Traits::kCmdBufferCompatible});

FamilyExports CudaExports() {
  return {{{"jaxdnn_bias_act_fwd", kBiasActFwdCuda},
           {"jaxdnn_bias_act_bwd", kBiasActBwdCuda},
           {"jaxdnn_glu_fwd", kGluFwdCuda},
           {"jaxdnn_glu_bwd", kGluBwdCuda}},
          {{"bias_act_bwd_partials", BiasBwdPartials}}};
}

}  // namespace jaxdnn::activations
