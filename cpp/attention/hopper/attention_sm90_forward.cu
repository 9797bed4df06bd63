// Host launcher of the Hopper attention forward (see attention_sm90_forward.cuh).
#include "attention/hopper/attention_sm90_forward.h"

#include <cstdint>

#include "attention/hopper/attention_sm90_forward.cuh"
#include "attention/hopper/sm90_tma.h"

namespace jaxdnn::attention {

namespace {

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

template <int kD, bool kF16, bool kPingpong, bool kPersistent>
cudaError_t Launch(const AttnFwdArgs& a, cudaStream_t stream) {
  using Cfg = sm90::FwdConfig<kD>;
  const AttnShape& s = a.shape;
  CUtensorMap tq, tk, tv;
  cudaError_t err;
  if ((err = sm90::MakeBhsdTensorMap(&tq, a.q, kF16, s.batch, s.q_len, s.heads, kD, Cfg::kBlockM)) != cudaSuccess) return err;
  if ((err = sm90::MakeBhsdTensorMap(&tk, a.k, kF16, s.batch, s.kv_len, s.kv_heads, kD, Cfg::kBlockN)) != cudaSuccess) return err;
  if ((err = sm90::MakeBhsdTensorMap(&tv, a.v, kF16, s.batch, s.kv_len, s.kv_heads, kD, Cfg::kBlockN)) != cudaSuccess) return err;

  sm90::FwdParams p;
  p.batch = static_cast<int>(s.batch);
  p.q_len = static_cast<int>(s.q_len);
  p.kv_len = static_cast<int>(s.kv_len);
  p.heads = static_cast<int>(s.heads);
  p.kv_heads = static_cast<int>(s.kv_heads);
  p.group = static_cast<int>(s.heads / s.kv_heads);
  p.num_m_blocks = static_cast<int>((s.q_len + Cfg::kBlockM - 1) / Cfg::kBlockM);
  p.causal = a.mask_params.causal ? 1 : 0;
  p.scale_log2 = a.mask_params.scale * 1.4426950408889634f;
  p.out = a.out;
  p.lse = a.lse;

  auto kernel = sm90::AttnFwdSm90Kernel<kD, kF16, kPingpong, kPersistent>;
  if ((err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  Cfg::kSmemBytes)) != cudaSuccess) {
    return err;
  }
  const int64_t tiles = static_cast<int64_t>(p.num_m_blocks) * p.heads * p.batch;
  int grid = static_cast<int>(tiles);
  if (kPersistent) {
    int dev = 0, sms = 0;
    if ((err = cudaGetDevice(&dev)) != cudaSuccess) return err;
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return err;
    if (grid > sms) grid = sms;
  }
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(tq, tk, tv, p);
  return cudaGetLastError();
}

}  // namespace

bool Sm90ForwardSupports(const AttnFwdArgs& p) {
  const AttnShape& s = p.shape;
  const AttnMaskParams& m = p.mask_params;
  if (p.dtype != ffi::DataType::BF16 && p.dtype != ffi::DataType::F16) return false;
  if (s.head_dim != 64 && s.head_dim != 128) return false;
  if (s.batch < 1 || s.q_len < 1 || s.kv_len < 1 || s.heads < 1 || s.kv_heads < 1) return false;
  if (s.heads % s.kv_heads != 0) return false;
  if (s.q_len > (int64_t{1} << 30) || s.kv_len > (int64_t{1} << 30) ||
      (s.q_len + 127) / 128 * s.heads * s.batch > int64_t{0x7fffffff}) {
    return false;
  }
  if (p.bias.data != nullptr || p.mask.data != nullptr) return false;
  if (m.q_lengths != nullptr || m.kv_lengths != nullptr || m.q_segments != nullptr ||
      m.kv_segments != nullptr) {
    return false;
  }
  if (m.softcap != 0.f || m.dropout_rate != 0.f || m.window_left >= 0 || m.window_right >= 0) return false;
  if (!(m.scale > 0.f)) return false;
  if (m.causal && s.q_len != s.kv_len) return false;
  if (!Aligned16(p.q) || !Aligned16(p.k) || !Aligned16(p.v) || !Aligned16(p.out) ||
      p.lse == nullptr) {
    return false;
  }
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    return false;
  }
  if (major != 9 || minor != 0) return false;
  return sm90::GetEncodeTiled() != nullptr;
}

cudaError_t LaunchAttentionFwdSm90Variant(const AttnFwdArgs& p, cudaStream_t stream, int variant) {
  const bool f16 = p.dtype == ffi::DataType::F16;
  const int d = static_cast<int>(p.shape.head_dim);
  if (variant < 0) variant = p.mask_params.causal ? 1 : 3;
#define JAXDNN_SM90_CASE(D, PP, PERS)                                                     \
  if (d == D && variant == (PP) + 2 * (PERS)) {                                           \
    return f16 ? Launch<D, true, PP, PERS>(p, stream) : Launch<D, false, PP, PERS>(p, stream); \
  }
  JAXDNN_SM90_CASE(128, false, false)
  JAXDNN_SM90_CASE(128, true, false)
  JAXDNN_SM90_CASE(128, false, true)
  JAXDNN_SM90_CASE(128, true, true)
  JAXDNN_SM90_CASE(64, false, false)
  JAXDNN_SM90_CASE(64, true, false)
  JAXDNN_SM90_CASE(64, false, true)
  JAXDNN_SM90_CASE(64, true, true)
#undef JAXDNN_SM90_CASE
  return cudaErrorInvalidValue;
}

cudaError_t LaunchAttentionFwdSm90(const AttnFwdArgs& p, cudaStream_t stream) {
  return LaunchAttentionFwdSm90Variant(p, stream, kSm90DefaultVariant);
}

}  // namespace jaxdnn::attention
