// XLA FFI handlers for CUDA pooling: the stream comes from XLA, nothing
// synchronizes or allocates, so the handlers run inside XLA's command buffers.
#include <cuda_runtime_api.h>

#include <string>

#include "common/cuda_check.h"
#include "common/ffi_registry.h"
#include "pooling/ffi.h"
#include "pooling/geometry_attrs.h"
#include "pooling/sm80/pool_launch.h"

namespace jaxdnn::pooling {
namespace {

ffi::Error Failed(const LaunchStatus& s, const char* what) {
  return s.ok() ? ffi::Error::Success() : ffi::Error::Internal(std::string(what) + ": " + s.Text());
}

ffi::Error Fwd(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t channels,
               Dims in, Dims out, Dims window, Dims stride, Dims dilation, Dims pad_lo, int32_t max,
               int32_t count_include_pad, int32_t adaptive, int32_t with_index) {
  auto g = GeometryOf(BatchOf(args), channels, in, out, window, stride, dilation, pad_lo, max,
                      count_include_pad, adaptive);
  if (!g.has_value()) return g.error();
  auto p = ReadPoolFwdCall(args, rets, *g, with_index != 0);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Failed(PoolFwdCuda(*p, stream), "jaxdnn pooling forward");
}

ffi::Error Bwd(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t channels,
               Dims in, Dims out, Dims window, Dims stride, Dims dilation, Dims pad_lo, int32_t max,
               int32_t count_include_pad, int32_t adaptive) {
  auto g = GeometryOf(BatchOf(args), channels, in, out, window, stride, dilation, pad_lo, max,
                      count_include_pad, adaptive);
  if (!g.has_value()) return g.error();
  auto p = ReadPoolBwdCall(args, rets, *g);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  return Failed(PoolBwdCuda(*p, stream), "jaxdnn pooling backward");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kPoolFwdCuda, Fwd, JAXDNN_POOL_FWD_BIND(ffi::PlatformStream<cudaStream_t>),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kPoolBwdCuda, Bwd, JAXDNN_POOL_BIND(ffi::PlatformStream<cudaStream_t>),
                              {ffi::Traits::kCmdBufferCompatible});

FamilyExports CudaExports() {
  return {{{"jaxdnn_pool_fwd", kPoolFwdCuda}, {"jaxdnn_pool_bwd", kPoolBwdCuda}}, {}};
}

}  // namespace jaxdnn::pooling
