// XLA FFI handlers for CUDA convolution: the forward (Winograd where the
// call asks for it), the data gradient and the weight gradient on CUTLASS's
// sm90 implicit GEMMs (the forward of a
// 1x1 stride-1 layer on CUTLASS's persistent sm90 GEMM where
// PreferConv1x1Gemm picks it) where the build has the CUTLASS headers
// (JAXDNN_HAVE_CUTLASS); without them, or where a plan refuses a problem,
// the primitives lower to XLA's convolution
// (jaxdnn/conv/primitives.py, `fallback`). The stream and the workspace come
// from XLA; nothing allocates or synchronizes.
#include "common/ffi_registry.h"
#include "conv/fft/ffi_fft.h"

#ifdef JAXDNN_HAVE_CUTLASS
#include <cuda_runtime_api.h>

#include <array>
#include <string>

#include "common/cuda_check.h"
#include "conv/geometry_attrs.h"
#include "conv/heuristics.h"
#include "conv/sm80/depthwise_fwd.h"
#include "conv/sm90/conv1x1_gemm_sm90.h"
#include "conv/sm80/depthwise_wgrad_call.h"
#include "conv/sm80/grouped_fwd.h"
#include "conv/sm80/grouped_wgrad.h"
#include "conv/sm80/winograd_fwd.h"
#include "conv/sm90/conv_dgrad_sm90.h"
#include "conv/sm90/conv_fprop_sm90.h"
#include "conv/sm90/conv_wgrad_sm90.h"
#endif

namespace jaxdnn::conv {

#ifdef JAXDNN_HAVE_CUTLASS
namespace {

// The call's checked arguments struct (Args from ReadConvFwdCall and co.).
template <class Reader>
auto Decode(ffi::RemainingArgs args, ffi::RemainingRets rets, const ConvAttrs& attrs, Reader read)
    -> decltype(read(args, rets, ConvGeometry{}, Epilogue{})) {
  auto g = GeometryOf(BatchOf(args), attrs);
  if (!g.has_value()) return ffi::Unexpected(g.error());
  auto e = EpilogueOf(attrs);
  if (!e.has_value()) return ffi::Unexpected(e.error());
  return read(args, rets, *g, *e);
}

// Whether the forward of p runs on the 1x1 persistent GEMM (the rule picks
// it and the GEMM serves p) rather than on the implicit-GEMM convolution;
// the handler and the plan queries (workspace, tile) both ask this, so XLA
// allocates the workspace of the kernel that runs.
bool ForwardOnGemm(const ConvFwdArgs& p) {
  return IsPointwiseGemm(p.g) && PreferConv1x1Gemm(p.g) && Conv1x1GemmSm90Refusal(p) == nullptr;
}

// Whether the forward of p runs on the depthwise direct loop: only where
// the call forced algorithm="direct" until that kernel is measured.
bool ForwardOnDepthwise(const ConvFwdArgs& p) {
  return p.g.algorithm == kAlgoDirect && DepthwiseFwdRefusal(p) == nullptr;
}

// Whether the forward of p runs on the grouped tensor-core kernel: where
// the call asked for algorithm="direct".
bool ForwardOnGrouped(const ConvFwdArgs& p) {
  return p.g.algorithm == kAlgoDirect && GroupedFwdRefusal(p) == nullptr;
}

// Whether the weight gradient of p runs on the grouped kernel (the call
// gives dz as dy, with no activation).
bool WgradOnGrouped(const ConvWgradArgs& p) {
  return p.g.algorithm == kAlgoDirect && GroupedWgradRefusal(p) == nullptr;
}

// Whether the weight gradient of p runs on the depthwise kernel: where the
// call forced algorithm="direct", as the forward.
bool WgradOnDepthwise(const ConvWgradArgs& p) {
  return p.g.algorithm == kAlgoDirect && DepthwiseWgradCallRefusal(p) == nullptr;
}

ffi::Error Fwd(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t in_channels,
               int64_t out_channels, int64_t groups, Dims in, Dims out, Dims window, Dims stride,
               Dims in_dilation, Dims k_dilation, Dims pad_lo, int32_t act, float act_param, float alpha,
               float beta, int32_t saved, int32_t has_bias, int32_t has_residual, int32_t algorithm) {
  const ConvAttrs attrs{in_channels, out_channels, groups,     in,       out,          window,
                        stride,      in_dilation,  k_dilation, pad_lo,   act,          act_param,
                        alpha,       beta,         saved,      has_bias, has_residual, algorithm};
  auto p = Decode(args, rets, attrs, ReadConvFwdCall);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  if (p->g.algorithm == kAlgoWinograd) {
    const LaunchStatus s = WinogradFwdCuda(*p, stream);
    if (!s.ok()) return ffi::Error::Internal("jaxdnn conv forward (winograd): " + s.Text());
    return ffi::Error::Success();
  }
  if (ForwardOnDepthwise(*p)) {
    const LaunchStatus s = DepthwiseFwdCuda(*p, stream);
    if (!s.ok()) return ffi::Error::Internal("jaxdnn conv forward (depthwise direct): " + s.Text());
    return ffi::Error::Success();
  }
  if (ForwardOnGrouped(*p)) {
    const LaunchStatus s = GroupedFwdCuda(*p, stream);
    if (!s.ok()) return ffi::Error::Internal("jaxdnn conv forward (grouped direct): " + s.Text());
    return ffi::Error::Success();
  }
  if (ForwardOnGemm(*p)) {
    const LaunchStatus s = Conv1x1GemmSm90(*p, p->workspace, p->workspace_bytes, stream);
    if (!s.ok()) return ffi::Error::Internal("jaxdnn conv forward (sm90 1x1 GEMM): " + s.Text());
    return ffi::Error::Success();
  }
  const LaunchStatus s = ConvFpropSm90(*p, p->workspace, p->workspace_bytes, stream);
  if (!s.ok()) return ffi::Error::Internal("jaxdnn conv forward (sm90): " + s.Text());
  return ffi::Error::Success();
}

ffi::Error Dgrad(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t in_channels,
                 int64_t out_channels, int64_t groups, Dims in, Dims out, Dims window, Dims stride,
                 Dims in_dilation, Dims k_dilation, Dims pad_lo, int32_t act, float act_param, float alpha,
                 float beta, int32_t saved, int32_t has_bias, int32_t has_residual, int32_t algorithm) {
  const ConvAttrs attrs{in_channels, out_channels, groups,     in,       out,          window,
                        stride,      in_dilation,  k_dilation, pad_lo,   act,          act_param,
                        alpha,       beta,         saved,      has_bias, has_residual, algorithm};
  auto p = Decode(args, rets, attrs, ReadConvDgradCall);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  const LaunchStatus s = ConvDgradSm90(*p, stream);
  if (!s.ok()) return ffi::Error::Internal("jaxdnn conv data gradient (sm90): " + s.Text());
  return ffi::Error::Success();
}

ffi::Error Wgrad(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t in_channels,
                 int64_t out_channels, int64_t groups, Dims in, Dims out, Dims window, Dims stride,
                 Dims in_dilation, Dims k_dilation, Dims pad_lo, int32_t act, float act_param, float alpha,
                 float beta, int32_t saved, int32_t has_bias, int32_t has_residual, int32_t algorithm) {
  const ConvAttrs attrs{in_channels, out_channels, groups,     in,       out,          window,
                        stride,      in_dilation,  k_dilation, pad_lo,   act,          act_param,
                        alpha,       beta,         saved,      has_bias, has_residual, algorithm};
  auto p = Decode(args, rets, attrs, ReadConvWgradCall);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  if (WgradOnDepthwise(*p)) {
    const LaunchStatus s = DepthwiseWgradCall(*p, stream);
    if (!s.ok()) return ffi::Error::Internal("jaxdnn conv weight gradient (depthwise): " + s.Text());
    return ffi::Error::Success();
  }
  if (WgradOnGrouped(*p)) {
    const LaunchStatus s = GroupedWgradCuda(*p, stream);
    if (!s.ok()) return ffi::Error::Internal("jaxdnn conv weight gradient (grouped direct): " + s.Text());
    return ffi::Error::Success();
  }
  const LaunchStatus s = ConvWgradSm90(*p, stream);
  if (!s.ok()) return ffi::Error::Internal("jaxdnn conv weight gradient (sm90): " + s.Text());
  return ffi::Error::Success();
}

// Plan queries: the workspace bytes for a problem, or -1 where the kernel
// does not serve it (Python then lowers the op to XLA). Arguments: the
// geometry's 7 dims as <name>0..2, batch, channels, groups, the epilogue and
// the dtypes as XLA FFI DataType codes (0: none).
ConvGeometry GeometryOfQuery(const QueryArgs& q) {
  ConvGeometry g;
  g.batch = QueryArg(q, "batch");
  g.in_channels = QueryArg(q, "in_channels");
  g.out_channels = QueryArg(q, "out_channels");
  g.groups = QueryArg(q, "groups");
  const char* names[] = {"in", "out", "window", "stride", "in_dilation", "k_dilation", "pad_lo"};
  std::array<int64_t, 3>* dims[] = {&g.in,          &g.out,        &g.window, &g.stride,
                                    &g.in_dilation, &g.k_dilation, &g.pad_lo};
  for (int d = 0; d < 7; ++d) {
    for (int k = 0; k < 3; ++k)
      (*dims[d])[k] = QueryArg(q, (std::string(names[d]) + std::to_string(k)).c_str());
  }
  return g;
}

Epilogue EpilogueOfQuery(const QueryArgs& q) {
  Epilogue e;
  e.act = int32_t(QueryArg(q, "act"));
  e.saved = int32_t(QueryArg(q, "saved"));
  e.has_bias = QueryArg(q, "has_bias") != 0;
  e.has_residual = QueryArg(q, "has_residual") != 0;
  return e;
}

ffi::DataType DtypeOfQuery(const QueryArgs& q, const char* key) {
  return static_cast<ffi::DataType>(QueryArg(q, key));
}

// Stand-in for the operands the plans only check for presence.
const char kPresent = 0;

// The forward's also take `algorithm`: the code the call asked for (0: none).
ConvFwdArgs FwdArgsOf(const QueryArgs& q) {
  ConvFwdArgs p;
  p.g = GeometryOfQuery(q);
  p.g.algorithm = int32_t(QueryArg(q, "algorithm"));
  p.e = EpilogueOfQuery(q);
  p.dtype = DtypeOfQuery(q, "dtype");
  p.out_dtype = DtypeOfQuery(q, "out_dtype");
  p.bias_dtype = DtypeOfQuery(q, "bias_dtype");
  p.residual_dtype = DtypeOfQuery(q, "residual_dtype");
  p.bias = p.e.has_bias ? &kPresent : nullptr;
  p.residual = p.e.has_residual ? &kPresent : nullptr;
  return p;
}

int64_t FwdWorkspace(const QueryArgs& q) {
  const ConvFwdArgs p = FwdArgsOf(q);
  if (p.g.algorithm == kAlgoWinograd) return WinogradFwdRefusal(p) ? -1 : int64_t(WinogradFwdWorkspace(p));
  if (ForwardOnDepthwise(p) || ForwardOnGrouped(p)) return 0;
  if (ForwardOnGemm(p)) return int64_t(Conv1x1GemmSm90Workspace(p));
  if (ConvFpropSm90Refusal(p) != nullptr) return -1;
  return int64_t(ConvFpropSm90Workspace(p));
}

// The CTA tile width (output channels) the forward's plan picks for a
// problem (the same arguments as FwdWorkspace), or -1 where it refuses.
int64_t FwdTileN(const QueryArgs& q) {
  const ConvFwdArgs p = FwdArgsOf(q);
  if (p.g.algorithm == kAlgoWinograd) return -1;  // no CTA tile of output channels to report
  if (ForwardOnDepthwise(p) || ForwardOnGrouped(p)) return -1;
  if (ForwardOnGemm(p)) return Conv1x1GemmSm90TileN(p);
  if (ConvFpropSm90Refusal(p) != nullptr) return -1;
  return ConvFpropSm90TileN(p);
}

// Which kernel the forward runs for a problem (the same arguments as
// FwdWorkspace): 1 the 1x1 persistent GEMM, 0 the implicit-GEMM
// convolution, 2 the depthwise direct loop, 3 the grouped tensor-core
// kernel, 4 Winograd with the 2x2 output tile and 5 with the 4x4, -1 none
// (the plans refuse it).
int64_t FwdKernel(const QueryArgs& q) {
  const ConvFwdArgs p = FwdArgsOf(q);
  if (p.g.algorithm == kAlgoWinograd) return WinogradFwdRefusal(p) ? -1 : (WinogradCudaTile(p) == 4 ? 5 : 4);
  if (ForwardOnDepthwise(p)) return 2;
  if (ForwardOnGrouped(p)) return 3;
  if (ForwardOnGemm(p)) return 1;
  return ConvFpropSm90Refusal(p) != nullptr ? -1 : 0;
}

// The data gradient's: dtype is w's (and dx's), dy_dtype dy's, residual_dtype
// the residual gradient's.
int64_t DgradWorkspace(const QueryArgs& q) {
  ConvDgradArgs p;
  p.g = GeometryOfQuery(q);
  p.e = EpilogueOfQuery(q);
  p.dtype = DtypeOfQuery(q, "dtype");
  p.dy_dtype = DtypeOfQuery(q, "dy_dtype");
  p.residual_dtype = DtypeOfQuery(q, "residual_dtype");
  if (ConvDgradSm90Refusal(p) != nullptr) return -1;
  return int64_t(ConvDgradSm90Workspace(p));
}

// The weight gradient's: dtype is x's (and dw's), dy_dtype dy's, bias_dtype
// the bias gradient's, algorithm the code the call asked for (0: none).
int64_t WgradWorkspace(const QueryArgs& q) {
  ConvWgradArgs p;
  p.g = GeometryOfQuery(q);
  p.e = EpilogueOfQuery(q);
  p.dtype = DtypeOfQuery(q, "dtype");
  p.dy_dtype = DtypeOfQuery(q, "dy_dtype");
  p.bias_dtype = DtypeOfQuery(q, "bias_dtype");
  p.g.algorithm = int32_t(QueryArg(q, "algorithm"));
  if (WgradOnDepthwise(p)) return int64_t(DepthwiseWgradCallWorkspace(p));
  if (WgradOnGrouped(p)) return int64_t(GroupedWgradWorkspace(p));
  if (ConvWgradSm90Refusal(p) != nullptr) return -1;
  return int64_t(ConvWgradSm90Workspace(p));
}

// 1 where the default (algorithm=None) runs a served problem on the sm90
// kernels, 0 where on XLA's convolution (conv/heuristics.h): the forward's
// choice, or with gradients=1 the data and weight gradients'.
int64_t PreferSm90(const QueryArgs& q) {
  const ConvGeometry g = GeometryOfQuery(q);
  return QueryArg(q, "gradients") != 0 ? PreferSm90Gradients(g) : PreferSm90Forward(g);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kConvFwdCuda, Fwd, JAXDNN_CONV_BIND(ffi::PlatformStream<cudaStream_t>),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(kConvDgradCuda, Dgrad, JAXDNN_CONV_BIND(ffi::PlatformStream<cudaStream_t>),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kConvWgradCuda, Wgrad, JAXDNN_CONV_BIND(ffi::PlatformStream<cudaStream_t>),
                              {ffi::Traits::kCmdBufferCompatible});

FamilyExports CudaExports() {
  return {{{"jaxdnn_conv_fwd", kConvFwdCuda},
           {"jaxdnn_conv_dgrad", kConvDgradCuda},
           {"jaxdnn_conv_wgrad", kConvWgradCuda},
           {"jaxdnn_conv_fft_mix", kConvFftMixCuda}},
          {{"conv_fwd_workspace", FwdWorkspace},
           {"conv_fwd_tile_n", FwdTileN},
           {"conv_fwd_kernel", FwdKernel},
           {"conv_dgrad_workspace", DgradWorkspace},
           {"conv_wgrad_workspace", WgradWorkspace},
           {"conv_prefer_sm90", PreferSm90}}};
}
#else
// The FFT mixing needs no CUTLASS.
FamilyExports CudaExports() { return {{{"jaxdnn_conv_fft_mix", kConvFftMixCuda}}, {}}; }
#endif

}  // namespace jaxdnn::conv
