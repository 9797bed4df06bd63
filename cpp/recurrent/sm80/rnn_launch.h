// The CUDA recurrences' launchers (rnn_fwd.cu, rnn_bwd.cu): one direction of
// one layer, problem.h's operands, the workspace the plan sizes
// (MakeRnnPlan(...).ws_bytes), on `stream`; nothing synchronizes or
// allocates, so they run inside XLA's command buffers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/launch_status.h"
#include "recurrent/problem.h"
#include "recurrent/sm80/rnn_plan.h"

namespace jaxdnn::recurrent {

LaunchStatus RnnFwdCuda(const RnnFwdArgs& a, WeightDtype wd, const RnnDevice& dev, void* workspace,
                        int64_t workspace_bytes, cudaStream_t stream);
LaunchStatus RnnBwdCuda(const RnnBwdArgs& a, WeightDtype wd, const RnnDevice& dev, void* workspace,
                        int64_t workspace_bytes, cudaStream_t stream);

// The device's SM count and the shared memory a CTA may opt into.
inline cudaError_t RnnDeviceOf(int device, RnnDevice* out) {
  int sms = 0, smem = 0;
  cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  out->sms = sms;
  out->smem_optin = smem;
  return err;
}

}  // namespace jaxdnn::recurrent
