// XLA FFI handlers for CPU pooling: decode the call frame, run the kernel.
#include "common/ffi_registry.h"
#include "pooling/cpu/pool_kernels.h"
#include "pooling/ffi.h"
#include "pooling/geometry_attrs.h"

namespace jaxdnn::pooling {
namespace {

ffi::Error Fwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t channels,
               Dims in, Dims out, Dims window, Dims stride, Dims dilation, Dims pad_lo, int32_t max,
               int32_t count_include_pad, int32_t adaptive, int32_t with_index) {
  auto g = GeometryOf(BatchOf(args), channels, in, out, window, stride, dilation, pad_lo, max,
                      count_include_pad, adaptive);
  if (!g.has_value()) return g.error();
  auto p = ReadPoolFwdCall(args, rets, *g, with_index != 0);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn pooling forward", [&] { return PoolFwdCpu(*p, &pool); });
}

ffi::Error Bwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t channels,
               Dims in, Dims out, Dims window, Dims stride, Dims dilation, Dims pad_lo, int32_t max,
               int32_t count_include_pad, int32_t adaptive) {
  auto g = GeometryOf(BatchOf(args), channels, in, out, window, stride, dilation, pad_lo, max,
                      count_include_pad, adaptive);
  if (!g.has_value()) return g.error();
  auto p = ReadPoolBwdCall(args, rets, *g);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn pooling backward", [&] { return PoolBwdCpu(*p, &pool); });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kPoolFwdCpu, Fwd, JAXDNN_POOL_FWD_BIND(ffi::ThreadPool));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kPoolBwdCpu, Bwd, JAXDNN_POOL_BIND(ffi::ThreadPool));

FamilyExports CpuExports() {
  return {{{"jaxdnn_pool_fwd", kPoolFwdCpu}, {"jaxdnn_pool_bwd", kPoolBwdCpu}}, {}};
}

}  // namespace jaxdnn::pooling
