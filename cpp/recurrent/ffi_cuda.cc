// XLA FFI handlers for the CUDA recurrences: check the call frame
// (call_frame.cc), plan on the stream's device, launch into XLA's stream with
// XLA's workspace; nothing synchronizes or allocates, so they run inside
// command buffers. The plan query "rnn_workspace" sizes the workspace with
// the same plan (-1: no plan, the call runs the XLA composition).
#include <cuda_runtime_api.h>

#include <string>

#include "common/cuda_check.h"
#include "common/cuda_device.h"
#include "common/ffi_registry.h"
#include "recurrent/call_frame.h"
#include "recurrent/sm80/rnn_launch.h"

namespace jaxdnn::recurrent {
namespace {

using Workspace = ffi::ResultBuffer<ffi::U8>;

// The device's attributes, asked once per device.
ffi::ErrorOr<RnnDevice> DeviceOf(cudaStream_t stream, const char* op) {
  static PerDevice<RnnDevice> cache;  // std::call_once per device inside
  int device = -1;
  if (cudaError_t err = StreamDevice(stream, &device); err != cudaSuccess) {
    return ffi::Unexpected(
        ffi::Error::Internal(std::string(op) + ": the stream's device: " + cudaGetErrorString(err)));
  }
  RnnDevice dev = cache.Get(device, [&] {
    RnnDevice d;
    (void)RnnDeviceOf(device, &d);
    return d;
  });
  if (dev.sms <= 0)
    return ffi::Unexpected(ffi::Error::Internal(std::string(op) + ": no SM count for the device"));
  return dev;
}

bool KnownWeights(int32_t w) { return w >= 0 && w <= 2; }

ffi::Error Failed(const LaunchStatus& s, const char* op) {
  return s.ok() ? ffi::Error::Success() : ffi::Error::Internal(std::string(op) + ": " + s.Text());
}

ffi::Error Fwd(cudaStream_t stream, F32 gx, F32 w_hh, F32 b_hh, F32 h0, F32 c0, S32 lengths, OutF32 out,
               OutF32 h_n, OutF32 c_n, OutF32 saved, OutF32 c_seq, Workspace ws, int32_t mode,
               int32_t weights) {
  constexpr const char* op = "jaxdnn rnn forward (CUDA)";
  if (!KnownWeights(weights)) return InvalidArg(op, "unknown weight dtype " + std::to_string(weights));
  auto p = ReadFwdCall(op, mode, gx, w_hh, b_hh, h0, c0, lengths, out, h_n, c_n, saved, c_seq);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  auto dev = DeviceOf(stream, op);
  if (!dev.has_value()) return dev.error();
  return Failed(
      RnnFwdCuda(*p, WeightDtype(weights), *dev, ws->untyped_data(), int64_t(ws->size_bytes()), stream), op);
}

ffi::Error Bwd(cudaStream_t stream, F32 dout, F32 dh_n, F32 dc_n, F32 w_hh, F32 h0, F32 c0, S32 lengths,
               F32 out, F32 saved, F32 c_seq, OutF32 dgx, OutF32 dh0, OutF32 dc0, Workspace ws, int32_t mode,
               int32_t weights) {
  constexpr const char* op = "jaxdnn rnn backward (CUDA)";
  if (!KnownWeights(weights)) return InvalidArg(op, "unknown weight dtype " + std::to_string(weights));
  auto p = ReadBwdCall(op, mode, dout, dh_n, dc_n, w_hh, h0, c0, lengths, out, saved, c_seq, dgx, dh0, dc0);
  if (!p.has_value()) return p.error();
  ClearStaleLaunchError();
  auto dev = DeviceOf(stream, op);
  if (!dev.has_value()) return dev.error();
  return Failed(
      RnnBwdCuda(*p, WeightDtype(weights), *dev, ws->untyped_data(), int64_t(ws->size_bytes()), stream), op);
}

// Workspace bytes for one direction of one layer on the current device, or
// -1 where there is no plan. Empty problems need none.
int64_t WorkspaceBytes(const QueryArgs& a) {
  const int64_t mode = QueryArg(a, "mode"), weights = QueryArg(a, "weights");
  if (mode < 0 || mode > 3 || !KnownWeights(int32_t(weights))) return -1;
  const RnnDims d{QueryArg(a, "steps"), QueryArg(a, "batch"), QueryArg(a, "hidden")};
  if (d.steps == 0 || d.batch == 0 || d.hidden == 0) return 0;
  int device = -1;
  RnnDevice dev;
  if (DeviceOrCurrent(-1, &device) != cudaSuccess || RnnDeviceOf(device, &dev) != cudaSuccess) return -1;
  const RnnCudaPlan plan =
      MakeRnnPlan(QueryArg(a, "backward") != 0, RnnMode(mode), d, WeightDtype(weights), dev);
  return plan.ok ? plan.ws_bytes : -1;
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kRnnFwdCuda, Fwd,
                              JAXDNN_RNN_FWD_ARGS(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>())
                                  .Ret<ffi::Buffer<ffi::U8>>()
                                  .Attr<int32_t>("mode")
                                  .Attr<int32_t>("weights"),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kRnnBwdCuda, Bwd,
                              JAXDNN_RNN_BWD_ARGS(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>())
                                  .Ret<ffi::Buffer<ffi::U8>>()
                                  .Attr<int32_t>("mode")
                                  .Attr<int32_t>("weights"),
                              {ffi::Traits::kCmdBufferCompatible});

FamilyExports CudaExports() {
  return {{{"jaxdnn_rnn_fwd", kRnnFwdCuda}, {"jaxdnn_rnn_bwd", kRnnBwdCuda}},
          {{"rnn_workspace", WorkspaceBytes}}};
}

}  // namespace jaxdnn::recurrent
