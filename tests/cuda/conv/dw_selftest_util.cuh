// Host helpers the depthwise self-tests share: values rounded to a dtype,
// their bits in a device buffer's layout, and a device buffer.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../common/selftest_util.cuh"
#include "common/ffi_util.h"

namespace dw_selftest {

namespace ffi = xla::ffi;
using sm90_selftest::HostFromF;
using sm90_selftest::HostToF;

// Host values in a dtype: rounded, and as the bits a device buffer holds
// (16-bit ones through selftest_util's HostFromF / HostToF).
inline bool IsF16(ffi::DataType t) { return t == ffi::DataType::F16; }
inline size_t Bytes(ffi::DataType t) { return t == ffi::DataType::F32 ? 4 : 2; }
inline float Round(float v, ffi::DataType t) {
  return t == ffi::DataType::F32 ? v : HostToF(HostFromF(v, IsF16(t)), IsF16(t));
}
inline void PutBits(std::vector<uint8_t>& out, size_t i, float v, ffi::DataType t) {
  if (t == ffi::DataType::F32) {
    std::memcpy(&out[i * 4], &v, 4);
  } else {
    const uint16_t bits = HostFromF(v, IsF16(t));
    std::memcpy(&out[i * 2], &bits, 2);
  }
}
inline float GetBits(const std::vector<uint8_t>& in, size_t i, ffi::DataType t) {
  if (t == ffi::DataType::F32) {
    float v;
    std::memcpy(&v, &in[i * 4], 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, &in[i * 2], 2);
  return HostToF(bits, IsF16(t));
}

struct Buf {
  void* d = nullptr;
  explicit Buf(size_t bytes) { CHECK_CUDA(cudaMalloc(&d, std::max<size_t>(bytes, 16))); }
  Buf(const std::vector<uint8_t>& h) : Buf(h.size()) {
    if (!h.empty()) CHECK_CUDA(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice));
  }
  ~Buf() { cudaFree(d); }
};

}  // namespace dw_selftest
