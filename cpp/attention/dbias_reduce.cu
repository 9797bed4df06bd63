// The broadcast dbias reduction (see dbias_reduce.h).
#include "attention/dbias_reduce.h"

#include <algorithm>

namespace jaxdnn::attention {
namespace {

// Each output element sums its full-size entries in a fixed order.
__global__ void DbiasReduceKernel(const float* full, float* dbias, Broadcast4 shape, AttnShape s) {
  const int64_t n = shape.dims[0] * shape.dims[1] * shape.dims[2] * shape.dims[3];
  const int64_t full_dims[4] = {s.batch, s.heads, s.q_len, s.kv_len};
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    int64_t coord[4], rest = idx;
    for (int a = 3; a >= 0; --a) {
      coord[a] = rest % shape.dims[a];
      rest /= shape.dims[a];
    }
    const int64_t span[4] = {shape.dims[0] == 1 ? full_dims[0] : 1, shape.dims[1] == 1 ? full_dims[1] : 1,
                             shape.dims[2] == 1 ? full_dims[2] : 1, shape.dims[3] == 1 ? full_dims[3] : 1};
    float acc = 0.f;
    for (int64_t x0 = 0; x0 < span[0]; ++x0)
      for (int64_t x1 = 0; x1 < span[1]; ++x1)
        for (int64_t x2 = 0; x2 < span[2]; ++x2)
          for (int64_t x3 = 0; x3 < span[3]; ++x3) {
            const int64_t c0 = coord[0] + x0, c1 = coord[1] + x1, c2 = coord[2] + x2, c3 = coord[3] + x3;
            acc += full[((c0 * full_dims[1] + c1) * full_dims[2] + c2) * full_dims[3] + c3];
          }
    dbias[idx] = acc;
  }
}

}  // namespace

cudaError_t LaunchDbiasReduce(const float* full, float* dbias, const Broadcast4& bias, const AttnShape& s,
                              cudaStream_t stream) {
  const int64_t n = bias.dims[0] * bias.dims[1] * bias.dims[2] * bias.dims[3];
  if (n == 0) return cudaSuccess;
  DbiasReduceKernel<<<unsigned(std::min<int64_t>((n + 255) / 256, 65535)), 256, 0, stream>>>(full, dbias,
                                                                                             bias, s);
  return cudaGetLastError();
}

}  // namespace jaxdnn::attention
