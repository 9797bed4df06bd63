// The depthwise weight-gradient call (depthwise_wgrad_call.h).
#include "conv/sm80/depthwise_wgrad_call.h"

#include <cstdint>

#include "common/activation.h"
#include "conv/sm80/depthwise_wgrad.h"
#include "conv/sm90/conv_sm90_aux.h"
#include "conv/sm90/conv_sm90_workspace.h"

namespace jaxdnn::conv {
namespace {

// The workspace's parts, in order: dz, the kernel's partials, the bias
// partials.
struct CallPlan {
  bool need_dz = false;
  size_t dz_bytes = 0, partial_bytes = 0, bias_bytes = 0;
  int bias_blocks = 0;
};

DepthwiseWgradArgs KernelArgsOf(const ConvWgradArgs& p) {
  DepthwiseWgradArgs k;
  k.g = p.g;
  k.dtype = p.dtype;
  k.dw_dtype = p.dtype;
  k.alpha = p.e.alpha;
  return k;
}

CallPlan PlanOf(const ConvWgradArgs& p) {
  CallPlan c;
  const int64_t rows = p.g.batch * p.g.out_positions();
  c.need_dz = static_cast<Act>(p.e.act) != Act::kIdentity;
  c.dz_bytes = c.need_dz ? sm90::RoundUp(size_t(rows * p.g.out_channels) * 2) : 0;
  c.partial_bytes = sm90::RoundUp(DepthwiseWgradWorkspace(KernelArgsOf(p)));
  if (p.e.has_bias) {
    c.bias_blocks = sm90::BiasRowBlocks(rows, int(p.g.out_channels));
    c.bias_bytes = sm90::RoundUp(size_t(c.bias_blocks) * size_t(p.g.out_channels) * 4);
  }
  return c;
}

}  // namespace

const char* DepthwiseWgradCallRefusal(const ConvWgradArgs& p) {
  if (p.dy_dtype != p.dtype) return "depthwise_wgrad: dy must have x's dtype";
  const bool prepass = static_cast<Act>(p.e.act) != Act::kIdentity || p.e.has_bias;
  if (prepass && p.dtype != ffi::DataType::BF16 && p.dtype != ffi::DataType::F16)
    return "depthwise_wgrad: an activation or bias gradient needs 16-bit dy (the pre-pass)";
  if (p.e.has_bias && p.bias_dtype != ffi::DataType::F32 && p.bias_dtype != ffi::DataType::BF16 &&
      p.bias_dtype != ffi::DataType::F16)
    return "depthwise_wgrad: the bias gradient must be float32, bfloat16 or float16";
  DepthwiseWgradArgs k = KernelArgsOf(p);
  k.g.batch = 1;
  return DepthwiseWgradRefusal(k);
}

size_t DepthwiseWgradCallWorkspace(const ConvWgradArgs& p) {
  const CallPlan c = PlanOf(p);
  return c.dz_bytes + c.partial_bytes + c.bias_bytes;
}

LaunchStatus DepthwiseWgradCall(const ConvWgradArgs& p, cudaStream_t stream) {
  if (const char* why = DepthwiseWgradCallRefusal(p)) return LaunchStatus::Refused(why);
  const CallPlan c = PlanOf(p);
  if (p.workspace == nullptr || p.workspace_bytes < c.dz_bytes + c.partial_bytes + c.bias_bytes)
    return LaunchStatus::Refused("depthwise_wgrad: workspace smaller than DepthwiseWgradCallWorkspace");
  if ((c.need_dz && p.saved == nullptr) || (p.e.has_bias && p.dbias == nullptr))
    return LaunchStatus::Refused("depthwise_wgrad: saved or bias gradient flagged but null");
  char* ws = static_cast<char*>(p.workspace);
  void* dz = c.need_dz ? ws : nullptr;
  float* bias_partials = p.e.has_bias ? reinterpret_cast<float*>(ws + c.dz_bytes + c.partial_bytes) : nullptr;
  const int channels = int(p.g.out_channels);
  const int64_t rows = p.g.batch * p.g.out_positions();
  if ((c.need_dz || p.e.has_bias) && rows > 0) {
    sm90::Prepass pre;
    pre.dy = p.dy;
    pre.saved = p.saved;
    pre.dz = dz;
    pre.bias_partials = bias_partials;
    pre.rows = rows;
    pre.channels = channels;
    pre.act = p.e.act;
    pre.act_param = p.e.act_param;
    pre.half = p.dtype == ffi::DataType::F16;
    const cudaError_t err = sm90::RunPrepass(pre, stream);
    if (err != cudaSuccess) return err;
  }
  DepthwiseWgradArgs k = KernelArgsOf(p);
  k.x = p.x;
  k.dz = c.need_dz ? dz : p.dy;
  k.dw = p.dw;
  k.workspace = ws + c.dz_bytes;
  k.workspace_bytes = c.partial_bytes;
  const LaunchStatus s = DepthwiseWgradCuda(k, stream);
  if (!s.ok()) return s;
  if (p.e.has_bias) {
    if (rows == 0)
      return cudaMemsetAsync(p.dbias, 0, size_t(channels) * (p.bias_dtype == ffi::DataType::F32 ? 4 : 2),
                             stream);
    return sm90::FinishBiasGrad(bias_partials, c.bias_blocks, channels, p.dbias, p.bias_dtype, stream);
  }
  return cudaSuccess;
}

}  // namespace jaxdnn::conv
