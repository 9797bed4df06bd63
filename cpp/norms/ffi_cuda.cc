// XLA FFI handlers for the CUDA norms: the stream comes from XLA, the
// backward's workspace is an extra result that XLA allocates, nothing
// synchronizes, so the handlers run inside XLA's command buffers.
#include <cuda_runtime_api.h>

#include "norms/sm80/norm_launch.h"
#include "norms/ffi.h"

#include <string>

#include "common/ffi_registry.h"
#include "norms/plan.h"

namespace jaxdnn::norms {
namespace {

ffi::Error FwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t kind,
                   int32_t residual, float epsilon) {
  auto p = ReadFwdCall(args, rets, kind, residual != 0, epsilon);
  if (!p.has_value()) return p.error();
  return NormFwdCuda(*p, stream);
}

ffi::Error BwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t kind,
                   int32_t residual) {
  auto p = ReadBwdCall(args, rets, kind, residual != 0, /*has_workspace=*/true);
  if (!p.has_value()) return p.error();
  const NormBwdPlan plan = MakeNormBwdPlan(p->shape, p->dtype == ffi::DataType::F32 ? 4 : 2);
  if (p->num_partials != plan.partials) {
    return InvalidArg("jaxdnn norm backward", "the workspace holds " + std::to_string(p->num_partials) +
                                                  " partials where the plan has " +
                                                  std::to_string(plan.partials));
  }
  return NormBwdCuda(*p, stream);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kNormFwdCuda, FwdCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int32_t>("kind")
                                  .Attr<int32_t>("residual")
                                  .Attr<float>("epsilon"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(kNormBwdCuda, BwdCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int32_t>("kind")
                                  .Attr<int32_t>("residual"),
                              {ffi::Traits::kCmdBufferCompatible});

FamilyExports CudaExports() {
  return {{{"jaxdnn_norm_fwd", kNormFwdCuda}, {"jaxdnn_norm_bwd", kNormBwdCuda}},
          {{"norm_bwd_partials", [](const QueryArgs& q) {
              NormShape s;
              s.rows = QueryArg(q, "rows");
              s.dim = QueryArg(q, "dim");
              s.groups = QueryArg(q, "groups");
              return MakeNormBwdPlan(s, QueryArg(q, "itemsize")).partials;
            }}}};
}

}  // namespace jaxdnn::norms
