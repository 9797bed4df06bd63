// Host side of the Hopper tensor copy engine: CUtensorMap descriptors built with
// cuTensorMapEncodeTiled, fetched through cudaGetDriverEntryPointByVersion so
// nothing links against libcuda. No allocation, no synchronization: safe inside
// an XLA FFI handler and under CUDA graph capture.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>

#include "common/cuda_device.h"

namespace jaxdnn::sm90 {

using EncodeTiledFn = PFN_cuTensorMapEncodeTiled_v12000;

// The driver's cuTensorMapEncodeTiled, looked up once (null when unavailable).
inline EncodeTiledFn GetEncodeTiled() {
  static EncodeTiledFn fn = []() -> EncodeTiledFn {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      return nullptr;
    }
    return reinterpret_cast<EncodeTiledFn>(ptr);
  }();
  return fn;
}

// A [batch, seq, heads, head_dim] row-major 16-bit tensor viewed as the 4-D
// tensor (head_dim, heads, seq, batch), innermost first. One box is
// (64 elements of head_dim = 128 bytes, 1 head, box_rows rows, 1 batch), landing
// in shared memory as box_rows rows of 128 bytes with the 128-byte swizzle.
// Rows past seq and columns past head_dim (the second panel of head dim 96)
// are zero-filled on load, and not written by stores.
inline cudaError_t MakeBhsdTensorMap(CUtensorMap* map, const void* base, bool f16, int64_t batch, int64_t seq,
                                     int64_t heads, int64_t head_dim, uint32_t box_rows) {
  EncodeTiledFn encode = GetEncodeTiled();
  if (encode == nullptr) return cudaErrorNotSupported;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(seq), static_cast<cuuint64_t>(batch)};
  const cuuint64_t elem = 2;
  const cuuint64_t strides[3] = {head_dim * elem, heads * head_dim * elem, seq * heads * head_dim * elem};
  const cuuint32_t box[4] = {64, 1, box_rows, 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4,
                            const_cast<void*>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// True when `device` (-1: the current one) is compute capability 9.0 (the
// sm_90a code runs there only) and the driver can encode tensor maps.
inline bool Sm90DeviceReady(int device) {
  int dev = 0, major = 0, minor = 0;
  if (DeviceOrCurrent(device, &dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    return false;
  }
  return major == 9 && minor == 0 && GetEncodeTiled() != nullptr;
}

}  // namespace jaxdnn::sm90
