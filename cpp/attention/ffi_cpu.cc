// XLA FFI handlers for CPU attention: decode the call frame, run the kernel.
#include "attention/ffi.h"
#include "common/ffi_registry.h"

#include "attention/cpu/attention_kernels.h"

namespace jaxdnn::attention {
namespace {

ffi::Error FwdCpu(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t operands,
                  float scale, float softcap, int32_t causal, int32_t window_left, int32_t window_right,
                  float dropout_rate) {
  auto p = ReadFwdCall(args, rets, operands, scale, softcap, causal, window_left, window_right, dropout_rate);
  if (!p.has_value()) return p.error();
  if (p->shape.vdim() != p->shape.head_dim) {  // Python pads value to the query's head dim for the CPU
    return InvalidArg("jaxdnn attention",
                      "the CPU kernel takes value at the query's head_dim, got " + ShapeText(p->shape));
  }
  return RunCatching("jaxdnn attention forward", [&] { return AttentionFwdCpu(*p, &pool); });
}

ffi::Error BwdCpu(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t operands,
                  float scale, float softcap, int32_t causal, int32_t window_left, int32_t window_right,
                  float dropout_rate, int32_t deterministic) {
  auto p = ReadBwdCall(args, rets, operands, scale, softcap, causal, window_left, window_right, dropout_rate,
                       /*has_workspace=*/false);
  if (!p.has_value()) return p.error();
  // Always deterministic: a fixed order per item.
  return RunCatching("jaxdnn attention backward", [&] { return AttentionBwdCpu(*p, &pool); });
}

// paged_attention: the same kernel, reading K and V through the block tables.
ffi::Error PagedFwdCpu(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, float scale,
                       float softcap, int32_t window_left, int32_t window_right) {
  auto p = ReadPagedFwdCall(args, rets, scale, softcap, window_left, window_right);
  if (!p.has_value()) return p.error();
  return RunCatching("jaxdnn paged attention forward", [&] { return AttentionFwdCpu(*p, &pool); });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kPagedAttentionFwdCpu, PagedFwdCpu,
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>() JAXDNN_PAGED_ATTENTION_ATTRS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(kAttentionFwdCpu, FwdCpu,
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>() JAXDNN_ATTENTION_ATTRS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(kAttentionBwdCpu, BwdCpu,
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()
                                  JAXDNN_ATTENTION_ATTRS.Attr<int32_t>("deterministic"));

FamilyExports CpuExports() {
  return {{{"jaxdnn_attention_fwd", kAttentionFwdCpu},
           {"jaxdnn_attention_bwd", kAttentionBwdCpu},
           {"jaxdnn_paged_attention_fwd", kPagedAttentionFwdCpu}},
          {}};
}

}  // namespace jaxdnn::attention
