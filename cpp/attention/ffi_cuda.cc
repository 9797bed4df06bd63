// XLA FFI handler for CUDA attention: the stream comes from XLA, nothing
// allocates or synchronizes, so it runs inside XLA's command buffers.
#include <cuda_runtime_api.h>

#include <string>

#include "attention/launch_cuda.h"
#include "attention/ffi.h"
#include "attention/plan.h"
#include "attention/sm80/decode_split.h"
#include "common/cuda_check.h"
#include "common/cuda_device.h"
#include "common/ffi_registry.h"

namespace jaxdnn::attention {
namespace {

// What the CUDA kernels cover; the Python side routes everything else elsewhere.
// Head dims 96 and 192 where the plan's ForwardNativeHeadDim /
// BackwardNativeHeadDim say so (the launchers refuse the rest).
ffi::Error CheckCudaProblem(const AttnShape& s, ffi::DataType dtype, bool native_dims) {
  const bool native_dim = native_dims && (s.head_dim == 96 || s.head_dim == 192);
  if (!CudaHeadDimSupported(s.head_dim) && !native_dim) {
    return InvalidArg("jaxdnn attention", std::string("the CUDA kernel takes head_dim 64, 128 or 256 (96 and "
                                                      "192 on sm90), got ") +
                                              std::to_string(s.head_dim));
  }
  if (dtype != ffi::DataType::BF16 && dtype != ffi::DataType::F16) {
    return InvalidArg("jaxdnn attention", "the CUDA kernel takes bfloat16 or float16");
  }
  if (s.batch > 65535 || s.heads > 65535) {
    // Python cuts a larger batch into calls of at most 65535 (primitives.SPLIT_LIMITS).
    return InvalidArg("jaxdnn attention",
                      "batch and heads must be at most 65535 per CUDA call, got " + ShapeText(s));
  }
  return ffi::Error::Success();
}

ffi::Error FwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t operands,
                   float scale, float softcap, int32_t causal, int32_t window_left, int32_t window_right,
                   float dropout_rate) {
  auto p = ReadFwdCall(args, rets, operands, scale, softcap, causal, window_left, window_right, dropout_rate);
  if (!p.has_value()) return p.error();
  if (ffi::Error e = CheckCudaProblem(p->shape, p->dtype, /*native_dims=*/true); e.failure()) return e;
  if (cudaError_t err = StreamDevice(stream, &p->device); err != cudaSuccess) {
    return ffi::Error::Internal(std::string("jaxdnn attention forward: the stream's device: ") +
                                cudaGetErrorString(err));
  }
  ClearStaleLaunchError();
  if (p->workspace_elems < ForwardWorkspaceElems(ProblemOf(*p, operands))) {
    return InvalidArg("jaxdnn attention", "the forward workspace is smaller than the plan's");
  }
  const LaunchStatus st = AttentionFwdCuda(*p, stream);
  if (!st.ok()) {
    return ffi::Error::Internal("jaxdnn attention forward launch " + ShapeText(p->shape) +
                                " failed: " + st.Text());
  }
  return ffi::Error::Success();
}

ffi::Error BwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t operands,
                   float scale, float softcap, int32_t causal, int32_t window_left, int32_t window_right,
                   float dropout_rate, int32_t deterministic) {
  auto p = ReadBwdCall(args, rets, operands, scale, softcap, causal, window_left, window_right, dropout_rate,
                       /*has_workspace=*/true);
  if (!p.has_value()) return p.error();
  // Only the fused sm90 backward's opt-in atomic dQ mode uses this; every
  // other CUDA backward is deterministic whatever it says.
  p->deterministic = deterministic != 0;
  if (ffi::Error e = CheckCudaProblem(p->shape, p->dtype, /*native_dims=*/true); e.failure()) return e;
  if (cudaError_t err = StreamDevice(stream, &p->device); err != cudaSuccess) {
    return ffi::Error::Internal(std::string("jaxdnn attention backward: the stream's device: ") +
                                cudaGetErrorString(err));
  }
  ClearStaleLaunchError();
  const AttnProblem problem = ProblemOf(*p, operands);
  if (p->workspace_elems < BackwardWorkspaceElems(problem)) {
    return InvalidArg("jaxdnn attention", "the backward workspace is smaller than the plan's");
  }
  // The plan sized the workspace for the Hopper kernels the problem fits; a
  // call that still falls back to the sm80 kernel (a device without them, a
  // switch set after the trace, unaligned buffers) needs its larger one.
  if (AttentionBwdPath(*p) == BwdPath::kSm80 && p->workspace_elems < Sm80BackwardWorkspaceElems(problem)) {
    return InvalidArg(
        "jaxdnn attention",
        "this backward " + ShapeText(p->shape) + " falls back to the sm80 kernel, which needs " +
            std::to_string(Sm80BackwardWorkspaceElems(problem)) +
            " float32 workspace elements; the plan gave " + std::to_string(p->workspace_elems) +
            " for the Hopper kernels (set JAXDNN_ATTENTION_SM90_BWD=0 before tracing to plan for sm80)");
  }
  const LaunchStatus st = AttentionBwdCuda(*p, stream);
  if (!st.ok()) {
    return ffi::Error::Internal("jaxdnn attention backward launch " + ShapeText(p->shape) +
                                " failed: " + st.Text());
  }
  return ffi::Error::Success();
}

// paged_attention's decode: the split-KV kernels reading K and V through
// the block tables (Python sends longer query chunks elsewhere).
ffi::Error PagedFwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, float scale,
                        float softcap, int32_t window_left, int32_t window_right) {
  auto p = ReadPagedFwdCall(args, rets, scale, softcap, window_left, window_right);
  if (!p.has_value()) return p.error();
  if (ffi::Error e = CheckCudaProblem(p->shape, p->dtype, /*native_dims=*/false); e.failure()) return e;
  if (p->workspace_elems < PagedDecodeWorkspaceElems(p->shape)) {
    return InvalidArg("jaxdnn paged attention", "the workspace is smaller than the decode plan's");
  }
  if (cudaError_t err = StreamDevice(stream, &p->device); err != cudaSuccess) {
    return ffi::Error::Internal(std::string("jaxdnn paged attention: the stream's device: ") +
                                cudaGetErrorString(err));
  }
  ClearStaleLaunchError();
  const LaunchStatus st = LaunchPagedDecode(*p, stream);
  if (!st.ok()) {
    return ffi::Error::Internal("jaxdnn paged attention launch " + ShapeText(p->shape) +
                                " failed: " + st.Text());
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kPagedAttentionFwdCuda, PagedFwdCuda,
                              ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  JAXDNN_PAGED_ATTENTION_ATTRS,
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(kAttentionBwdCuda, BwdCuda,
                              ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  JAXDNN_ATTENTION_ATTRS.Attr<int32_t>("deterministic"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(kAttentionFwdCuda, FwdCuda,
                              ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  JAXDNN_ATTENTION_ATTRS,
                              {ffi::Traits::kCmdBufferCompatible});

namespace {

// A plan query's problem: the shapes, dtype and flags Python passes.
AttnProblem QueryProblem(const QueryArgs& q) {
  AttnProblem p;
  p.shape = {QueryArg(q, "batch"), QueryArg(q, "q_len"),    QueryArg(q, "kv_len"),
             QueryArg(q, "heads"), QueryArg(q, "kv_heads"), QueryArg(q, "head_dim")};
  // value's head dim (MLA); absent: the query's.
  if (auto it = q.find("value_dim"); it != q.end()) p.shape.value_dim = it->second;
  p.dtype = DataTypeFromCode(QueryArg(q, "dtype"));
  p.operands = static_cast<int32_t>(QueryArg(q, "operands"));
  p.causal = QueryArg(q, "causal") != 0;
  p.window_left = static_cast<int32_t>(QueryArg(q, "window_left"));
  p.window_right = static_cast<int32_t>(QueryArg(q, "window_right"));
  p.softcap = QueryArg(q, "softcap") != 0 ? 1.f : 0.f;
  p.dropout_rate = QueryArg(q, "dropout") != 0 ? 0.5f : 0.f;
  p.deterministic = QueryArg(q, "deterministic") != 0;
  p.scale_positive = QueryArg(q, "scale_positive") != 0;
  for (int i = 0; i < 4; ++i) p.bias_dims[i] = QueryArg(q, ("bias_dim" + std::to_string(i)).c_str());
  return p;
}

}  // namespace

FamilyExports CudaExports() {
  return {
      {{"jaxdnn_attention_fwd", kAttentionFwdCuda},
       {"jaxdnn_attention_bwd", kAttentionBwdCuda},
       {"jaxdnn_paged_attention_fwd", kPagedAttentionFwdCuda}},
      {{"attention_fwd_workspace", [](const QueryArgs& q) { return ForwardWorkspaceElems(QueryProblem(q)); }},
       {"paged_attention_fwd_workspace",
        [](const QueryArgs& q) {
          return PagedDecodeWorkspaceElems({QueryArg(q, "batch"), QueryArg(q, "q_len"), QueryArg(q, "kv_len"),
                                            QueryArg(q, "heads"), QueryArg(q, "kv_heads"),
                                            QueryArg(q, "head_dim")});
        }},
       {"attention_fwd_native_head_dim",
        [](const QueryArgs& q) { return static_cast<int64_t>(ForwardNativeHeadDim(QueryProblem(q))); }},
       {"attention_fwd_native_value_dim",
        [](const QueryArgs& q) { return static_cast<int64_t>(ForwardNativeValueDim(QueryProblem(q))); }},
       {"attention_bwd_native_head_dim",
        [](const QueryArgs& q) { return static_cast<int64_t>(BackwardNativeHeadDim(QueryProblem(q))); }},
       {"attention_mask_as_bias",
        [](const QueryArgs& q) { return static_cast<int64_t>(MaskAsBias(QueryProblem(q))); }},
       {"attention_bwd_workspace",
        [](const QueryArgs& q) { return BackwardWorkspaceElems(QueryProblem(q)); }}}};
}

}  // namespace jaxdnn::attention
