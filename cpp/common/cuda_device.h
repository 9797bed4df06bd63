// The device a CUDA handler runs on, and values computed once per device.
// XLA hands a handler its stream; the device is the stream's (not whatever
// cudaGetDevice says on this thread), and device attributes are asked of it.
#pragma once

#include <cuda_runtime.h>

#include <mutex>

namespace jaxdnn {

// The stream's device; while XLA captures the stream into a command buffer,
// the thread's current device (which XLA sets to the stream's before it
// calls a handler): asking a capturing stream for its device is refused and
// invalidates the capture.
inline cudaError_t StreamDevice(cudaStream_t stream, int* device) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(stream, &capture);
  if (err != cudaSuccess) return err;
  if (capture != cudaStreamCaptureStatusNone) return cudaGetDevice(device);
  return cudaStreamGetDevice(stream, device);
}

// CTAs of `kernel` one SM holds at once, or 1 where the runtime will not
// say: the occupancy query is refused while a stream is captured into a
// command buffer. For grids that stride over their work (never for a grid
// that must be resident at once, which needs the real number).
inline int ResidentCtasOrOne(const void* kernel, int threads, size_t smem) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  return per_sm > 0 ? per_sm : 1;
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
