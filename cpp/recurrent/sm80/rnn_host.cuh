// Host steps both persistent recurrences take: slicing the weights into the
// workspace, the cooperative launch, and the zero-step call.
#pragma once

#include <cuda_runtime.h>

#include "common/launch_status.h"
#include "recurrent/sm80/rnn_device.cuh"

namespace jaxdnn::recurrent {

template <typename WT>
LaunchStatus SliceAll(const float* w_hh, WT* slices, const RnnCudaPlan& plan, const RnnShape& s,
                      cudaStream_t stream) {
  const int64_t total = plan.unit_ctas * plan.slice_elems();
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 4096);
  SliceWeights<WT><<<unsigned(blocks), 256, 0, stream>>>(w_hh, slices, s, plan.backward ? 1 : 0, total);
  return cudaGetLastError();
}

// The step barrier needs every CTA resident at once: a cooperative launch
// (the plan never asks for more CTAs than SMs, nor more shared memory than
// one CTA may have), which fails rather than deadlocks where they would not
// fit. No occupancy query here: it is refused while XLA captures the stream
// into a command buffer.
template <typename P, typename WT>
LaunchStatus LaunchPersistent(const void* kernel, const RnnCudaPlan& plan, cudaStream_t stream, const P& p,
                              const WT* slices) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(plan.ctas));
  cfg.blockDim = dim3(kRnnThreads);
  cfg.dynamicSmemBytes = size_t(plan.smem_bytes);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  P params = p;
  const WT* w = slices;
  void* args[] = {&params, &w};
  return cudaLaunchKernelExC(&cfg, kernel, args);
}

// The kernel Kernel<M, WT>::fn for the call's mode (the mode a template
// argument, each a kernel of its own), or null for an unknown mode.
template <template <RnnMode, typename> class Kernel, typename WT>
const void* KernelFor(RnnMode m) {
  switch (m) {
    case RnnMode::kLstm: return reinterpret_cast<const void*>(Kernel<RnnMode::kLstm, WT>::fn);
    case RnnMode::kGru: return reinterpret_cast<const void*>(Kernel<RnnMode::kGru, WT>::fn);
    case RnnMode::kTanh: return reinterpret_cast<const void*>(Kernel<RnnMode::kTanh, WT>::fn);
    case RnnMode::kRelu: return reinterpret_cast<const void*>(Kernel<RnnMode::kRelu, WT>::fn);
  }
  return nullptr;
}

// Both directions' launch once the plan holds and the kernel's parameters
// are built: the weights sliced into the workspace (its start) in WT, the
// barrier counter zeroed, the persistent kernel launched.
template <template <RnnMode, typename> class Kernel, typename WT, typename P>
LaunchStatus RunTyped(RnnMode m, const float* w_hh, const P& p, const RnnCudaPlan& plan, char* ws,
                      cudaStream_t stream) {
  WT* slices = reinterpret_cast<WT*>(ws);
  LaunchStatus st = SliceAll(w_hh, slices, plan, p.s, stream);
  if (!st.ok()) return st;
  cudaError_t err = cudaMemsetAsync(p.counter, 0, sizeof(unsigned int), stream);
  if (err != cudaSuccess) return err;
  const void* kernel = KernelFor<Kernel, WT>(m);
  if (kernel == nullptr) return LaunchStatus::Refused("unknown recurrent mode");
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.smem_bytes));
  if (err != cudaSuccess) return err;
  return LaunchPersistent(kernel, plan, stream, p, static_cast<const WT*>(slices));
}

template <template <RnnMode, typename> class Kernel, typename P>
LaunchStatus RunPersistent(RnnMode m, WeightDtype wd, const float* w_hh, const P& p, const RnnCudaPlan& plan,
                           char* ws, cudaStream_t stream) {
  switch (wd) {
    case WeightDtype::kF32: return RunTyped<Kernel, float>(m, w_hh, p, plan, ws, stream);
    case WeightDtype::kBf16: return RunTyped<Kernel, __nv_bfloat16>(m, w_hh, p, plan, ws, stream);
    case WeightDtype::kF16: return RunTyped<Kernel, __half>(m, w_hh, p, plan, ws, stream);
  }
  return LaunchStatus::Refused("unknown weight dtype");
}

inline cudaError_t CopyIfAny(float* to, const float* from, int64_t elems, cudaStream_t stream) {
  if (elems == 0) return cudaSuccess;
  return cudaMemcpyAsync(to, from, size_t(elems) * sizeof(float), cudaMemcpyDeviceToDevice, stream);
}

}  // namespace jaxdnn::recurrent
