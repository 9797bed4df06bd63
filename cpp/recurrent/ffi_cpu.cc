// XLA FFI handlers for the CPU recurrences: check the call frame
// (call_frame.cc), run the kernel. `weights` (the GPU's weight precision) is
// accepted and unused: the CPU multiplies in float32.
#include "common/ffi_registry.h"
#include "recurrent/call_frame.h"
#include "recurrent/cpu/rnn_kernels.h"

namespace jaxdnn::recurrent {
namespace {

ffi::Error Fwd(F32 gx, F32 w_hh, F32 b_hh, F32 h0, F32 c0, S32 lengths, OutF32 out, OutF32 h_n, OutF32 c_n,
               OutF32 saved, OutF32 c_seq, int32_t mode, int32_t /*weights*/) {
  constexpr const char* op = "jaxdnn rnn forward";
  auto p = ReadFwdCall(op, mode, gx, w_hh, b_hh, h0, c0, lengths, out, h_n, c_n, saved, c_seq);
  if (!p.has_value()) return p.error();
  return RunCatching(op, [&] {
    RnnFwdCpu(*p);
    return ffi::Error::Success();
  });
}

ffi::Error Bwd(F32 dout, F32 dh_n, F32 dc_n, F32 w_hh, F32 h0, F32 c0, S32 lengths, F32 out, F32 saved,
               F32 c_seq, OutF32 dgx, OutF32 dh0, OutF32 dc0, int32_t mode, int32_t /*weights*/) {
  constexpr const char* op = "jaxdnn rnn backward";
  auto p = ReadBwdCall(op, mode, dout, dh_n, dc_n, w_hh, h0, c0, lengths, out, saved, c_seq, dgx, dh0, dc0);
  if (!p.has_value()) return p.error();
  return RunCatching(op, [&] {
    RnnBwdCpu(*p);
    return ffi::Error::Success();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    kRnnFwdCpu, Fwd, JAXDNN_RNN_FWD_ARGS(ffi::Ffi::Bind()).Attr<int32_t>("mode").Attr<int32_t>("weights"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    kRnnBwdCpu, Bwd, JAXDNN_RNN_BWD_ARGS(ffi::Ffi::Bind()).Attr<int32_t>("mode").Attr<int32_t>("weights"));

FamilyExports CpuExports() { return {{{"jaxdnn_rnn_fwd", kRnnFwdCpu}, {"jaxdnn_rnn_bwd", kRnnBwdCpu}}, {}}; }

}  // namespace jaxdnn::recurrent
