// What a CUDA launcher reports: success, a CUDA error, or a condition it
// refuses that is not a CUDA error (no kernel compiled for a variant, a
// workspace too small for the path), as static text naming the condition,
// so the handler's error says what went wrong instead of "invalid argument".
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace jaxdnn {

class LaunchStatus {
 public:
  LaunchStatus() = default;
  // Implicit, so a launcher's `return err;` of a CUDA error reads as before.
  LaunchStatus(cudaError_t err) : cuda_(err) {}  // NOLINT(google-explicit-constructor)
  static LaunchStatus Refused(const char* why) {
    LaunchStatus s;
    s.refused_ = why;
    return s;
  }
  bool ok() const { return cuda_ == cudaSuccess && refused_ == nullptr; }
  bool refused() const { return refused_ != nullptr; }
  std::string Text() const { return refused_ != nullptr ? std::string(refused_) : cudaGetErrorString(cuda_); }

 private:
  cudaError_t cuda_ = cudaSuccess;
  const char* refused_ = nullptr;  // static text
};

// For code that checks either kind of result (the self-tests' CHECK_CUDA).
inline bool LaunchOk(cudaError_t e) { return e == cudaSuccess; }
inline bool LaunchOk(const LaunchStatus& s) { return s.ok(); }
inline std::string LaunchText(cudaError_t e) { return cudaGetErrorString(e); }
inline std::string LaunchText(const LaunchStatus& s) { return s.Text(); }

}  // namespace jaxdnn
