// Launching a RowSplit: a cluster launch (one row per cluster of `cluster`
// CTAs) or rows of `rpc` per CTA, and the dtype dispatch of the vector
// kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/ffi_util.h"
#include "softmax/sm90/row_split.h"

namespace jaxdnn::softmax {

// `clusters` clusters of s.cluster CTAs (or plain CTAs when s.cluster is 1)
// of s.tpr x s.rpc threads with `smem` dynamic shared-memory bytes.
template <typename... Params, typename... Args>
cudaError_t LaunchClusters(void (*kernel)(Params...), const RowSplit& s, int64_t clusters, int smem,
                           cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.blockDim = dim3(s.tpr, s.rpc, 1);
  cfg.gridDim = dim3(unsigned(clusters * s.cluster), 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  if (s.cluster > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = s.cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, args...);
  return err != cudaSuccess ? err : cudaGetLastError();
}

// One row per cluster, or rows of s.rpc per CTA.
template <typename... Params, typename... Args>
cudaError_t LaunchRows(void (*kernel)(Params...), const RowSplit& s, int64_t rows, cudaStream_t stream,
                       Args... args) {
  const int64_t groups = s.cluster > 1 ? rows : (rows + s.rpc - 1) / s.rpc;
  return LaunchClusters(kernel, s, groups, 0, stream, args...);
}

// launch(T{}) with T the element type of `dtype`.
template <typename Launch>
cudaError_t ByDtype(ffi::DataType dtype, Launch launch) {
  switch (dtype) {
    case ffi::DataType::F32: return launch(float{});
    case ffi::DataType::BF16: return launch(__nv_bfloat16{});
    case ffi::DataType::F16: return launch(__half{});
    default: return cudaErrorInvalidValue;  // the call-frame readers admit only these
  }
}

}  // namespace jaxdnn::softmax
