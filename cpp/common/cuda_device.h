// The device a CUDA handler runs on, and values computed once per device.
// XLA hands a handler its stream; the device is the stream's (not whatever
// cudaGetDevice says on this thread), and device attributes are asked of it.
#pragma once

#include <cuda_runtime.h>

#include <mutex>

namespace jaxdnn {

// The stream's device.
inline cudaError_t StreamDevice(cudaStream_t stream, int* device) {
  return cudaStreamGetDevice(stream, device);
}

// `device` when it is known (>= 0), else the calling thread's current device.
inline cudaError_t DeviceOrCurrent(int device, int* out) {
  if (device >= 0) {
    *out = device;
    return cudaSuccess;
  }
  return cudaGetDevice(out);
}

// A value computed once per device ordinal, safely from any number of
// threads (std::call_once per device); ordinals past kMaxDevices are
// computed on every call.
template <typename T>
class PerDevice {
 public:
  template <typename Compute>
  T Get(int device, Compute&& compute) {
    if (device < 0 || device >= kMaxDevices) return compute();
    Slot& slot = slots_[device];
    std::call_once(slot.once, [&] { slot.value = compute(); });
    return slot.value;
  }

 private:
  static constexpr int kMaxDevices = 64;
  struct Slot {
    std::once_flag once;
    T value{};
  };
  Slot slots_[kMaxDevices];
};

}  // namespace jaxdnn
