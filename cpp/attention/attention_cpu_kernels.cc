// CPU attention: for each (batch, kv head) the keys and values are widened to
// float32 once; each query row then streams over its allowed keys in blocks
// with an online softmax (forward) or recomputes its probabilities from the
// saved log-sum-exp (backward). Memory is O(kv_len * head_dim), never
// O(q_len * kv_len). Sums run in a fixed order, so results are deterministic.
#include "attention/attention_cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attention/attention_mask.h"
#include "common/cpu_parallel.h"
#include "common/host_half.h"

namespace jaxdnn::attention {
namespace {

constexpr int64_t kKeyBlock = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float LoadAny(const void* data, ffi::DataType dtype, int64_t i) {
  switch (dtype) {
    case ffi::DataType::BF16: return ToFloat(static_cast<const bf16_t*>(data)[i]);
    case ffi::DataType::F16: return ToFloat(static_cast<const f16_t*>(data)[i]);
    default: return static_cast<const float*>(data)[i];
  }
}

// Eight running sums combined in a fixed order: vectorizable without
// reassociation flags, and the same result on every run.
float Dot(const float* a, const float* b, int64_t n) {
  float part[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    for (int u = 0; u < 8; ++u) part[u] += a[d + u] * b[d + u];
  }
  for (; d < n; ++d) part[0] += a[d] * b[d];
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
}

// Offsets of element [b, pos, head, 0] in a [batch, len, heads, D] array.
int64_t RowOffset(int64_t b, int64_t pos, int64_t head, int64_t len, int64_t heads, int64_t dim) {
  return ((b * len + pos) * heads + head) * dim;
}

template <typename T>
void Widen(const T* src, int64_t b, int64_t head, int64_t len, int64_t heads, int64_t dim,
           std::vector<float>& dst) {
  dst.resize(len * dim);
  for (int64_t j = 0; j < len; ++j) {
    const T* row = src + RowOffset(b, j, head, len, heads, dim);
    for (int64_t d = 0; d < dim; ++d) dst[j * dim + d] = ToFloat(row[d]);
  }
}

// Logit of (i, j) after bias, mask and segments; -inf when (i, j) is masked.
// `raw` receives the logit before the bias (for the softcap derivative).
struct LogitSource {
  const AttnMaskParams& m;
  const AttnShape& s;
  const Broadcast4& bias;
  ffi::DataType bias_dtype;
  const Broadcast4& mask;

  float operator()(int64_t b, int64_t h, int64_t i, int64_t j, float dot, float* raw) const {
    *raw = 0.f;
    if (!SameSegment(m, s, b, i, j)) return kNegInf;
    if (mask.data && !static_cast<const uint8_t*>(mask.data)[mask.Offset(b, h, i, j)]) return kNegInf;
    float x = Logit(m, dot);
    *raw = x;
    if (bias.data) x += LoadAny(bias.data, bias_dtype, bias.Offset(b, h, i, j));
    return x;
  }
};

// No per-pair rule beyond the key range: logits are just scaled products.
bool IsPlain(const AttnMaskParams& m, const Broadcast4& bias, const Broadcast4& mask) {
  return !m.q_segments && !m.kv_segments && !bias.data && !mask.data && !(m.softcap > 0.f);
}

template <typename T>
void Forward(const AttnFwdArgs& p, ffi::ThreadPool* pool) {
  const AttnShape& s = p.shape;
  const int64_t dim = s.head_dim, group = s.group();
  const AttnMaskParams& m = p.mask_params;
  const LogitSource logit{m, s, p.bias, p.bias_dtype, p.mask};
  const bool plain = IsPlain(m, p.bias, p.mask);
  const DropoutPlan drop(m);
  const T* q = static_cast<const T*>(p.q);
  T* out = static_cast<T*>(p.out);

  // One work item per (batch, query head): its rows are its own outputs.
  ParallelFor(pool, s.batch * s.heads, [&](int64_t item) {
    const int64_t b = item / s.heads, h = item % s.heads, kvh = h / group;
    std::vector<float> kf, vf, qrow(dim), acc(dim), block(kKeyBlock);
    Widen(static_cast<const T*>(p.k), b, kvh, s.kv_len, s.kv_heads, dim, kf);
    Widen(static_cast<const T*>(p.v), b, kvh, s.kv_len, s.kv_heads, dim, vf);
    {
      {
        for (int64_t i = 0; i < s.q_len; ++i) {
          const int64_t qo = RowOffset(b, i, h, s.q_len, s.heads, dim);
          for (int64_t d = 0; d < dim; ++d) qrow[d] = ToFloat(q[qo + d]);
          std::fill(acc.begin(), acc.end(), 0.f);
          const KeyRange r = AllowedKeys(m, s, b, i);
          const uint32_t row_state = drop.on ? DropoutRowState(m.seeds + 2 * b, uint32_t(h), uint32_t(i)) : 0;
          float run_max = kNegInf, run_sum = 0.f;
          for (int64_t j0 = r.lo; j0 < r.hi; j0 += kKeyBlock) {
            const int64_t n = std::min(kKeyBlock, r.hi - j0);
            float block_max = kNegInf;
            for (int64_t t = 0; t < n; ++t) block[t] = Dot(qrow.data(), &kf[(j0 + t) * dim], dim);
            for (int64_t t = 0; t < n; ++t) {
              float raw;
              block[t] = plain ? block[t] * m.scale : logit(b, h, i, j0 + t, block[t], &raw);
              block_max = std::max(block_max, block[t]);
            }
            if (block_max == kNegInf) continue;
            const float new_max = std::max(run_max, block_max);
            const float correction = run_max == kNegInf ? 0.f : std::exp(run_max - new_max);
            run_sum *= correction;
            for (int64_t d = 0; d < dim; ++d) acc[d] *= correction;
            for (int64_t t = 0; t < n; ++t) {
              if (block[t] == kNegInf) continue;
              const float pr = std::exp(block[t] - new_max);
              run_sum += pr;
              if (drop.on && !DropoutKeep(row_state, uint32_t(j0 + t), drop.threshold)) continue;
              const float w = pr * drop.keep_scale;
              const float* vrow = &vf[(j0 + t) * dim];
              for (int64_t d = 0; d < dim; ++d) acc[d] += w * vrow[d];
            }
            run_max = new_max;
          }
          const bool empty = !(run_sum > 0.f);
          const float inv = empty ? 0.f : 1.f / run_sum;
          for (int64_t d = 0; d < dim; ++d) out[qo + d] = FromFloat<T>(acc[d] * inv);
          p.lse[(b * s.heads + h) * s.q_len + i] = empty ? kNegInf : run_max + std::log(run_sum);
        }
      }
    }
  });
}

template <typename T>
void Backward(const AttnBwdArgs& p, ffi::ThreadPool* pool) {
  const AttnShape& s = p.shape;
  const int64_t dim = s.head_dim, group = s.group();
  const AttnMaskParams& m = p.mask_params;
  const LogitSource logit{m, s, p.bias, p.bias_dtype, p.mask};
  const bool plain = IsPlain(m, p.bias, p.mask);
  const DropoutPlan drop(m);
  const T* q = static_cast<const T*>(p.q);
  const T* o = static_cast<const T*>(p.out);
  const T* dout = static_cast<const T*>(p.dout);
  T* dq = static_cast<T*>(p.dq);
  T* dk = static_cast<T*>(p.dk);
  T* dv = static_cast<T*>(p.dv);

  if (p.dbias) {
    const int64_t n = p.bias.dims[0] * p.bias.dims[1] * p.bias.dims[2] * p.bias.dims[3];
    std::fill(p.dbias, p.dbias + n, 0.f);
  }
  // One work item per (batch, kv head): it owns that head's dK/dV and its
  // query heads' dQ. A bias gradient that broadcasts over batch or heads is
  // shared between items, so that case runs them in order on one thread.
  const bool shared_dbias =
      p.dbias && (p.bias.dims[0] != s.batch || p.bias.dims[1] != s.heads);
  ParallelFor(shared_dbias ? nullptr : pool, s.batch * s.kv_heads, [&](int64_t item) {
    const int64_t b = item / s.kv_heads, kvh = item % s.kv_heads;
    std::vector<float> kf, vf, dkf, dvf, qrow(dim), dorow(dim), dqrow(dim);
    {
      Widen(static_cast<const T*>(p.k), b, kvh, s.kv_len, s.kv_heads, dim, kf);
      Widen(static_cast<const T*>(p.v), b, kvh, s.kv_len, s.kv_heads, dim, vf);
      dkf.assign(s.kv_len * dim, 0.f);
      dvf.assign(s.kv_len * dim, 0.f);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t i = 0; i < s.q_len; ++i) {
          const int64_t qo = RowOffset(b, i, h, s.q_len, s.heads, dim);
          const int64_t stat = (b * s.heads + h) * s.q_len + i;
          const float lse = p.lse[stat];
          float delta = 0.f;  // rowsum(dO * O) minus the log-sum-exp cotangent
          for (int64_t d = 0; d < dim; ++d) {
            qrow[d] = ToFloat(q[qo + d]);
            dorow[d] = ToFloat(dout[qo + d]);
            delta += dorow[d] * ToFloat(o[qo + d]);
          }
          if (p.dlse) delta -= p.dlse[stat];
          std::fill(dqrow.begin(), dqrow.end(), 0.f);
          const KeyRange r = AllowedKeys(m, s, b, i);
          const uint32_t row_state = drop.on ? DropoutRowState(m.seeds + 2 * b, uint32_t(h), uint32_t(i)) : 0;
          for (int64_t j = r.lo; j < r.hi && lse != kNegInf; ++j) {
            const float* krow = &kf[j * dim];
            const float* vrow = &vf[j * dim];
            float raw = 0.f;
            const float dot = Dot(qrow.data(), krow, dim);
            const float x = plain ? dot * m.scale : logit(b, h, i, j, dot, &raw);
            if (x == kNegInf) continue;
            const float pr = std::exp(x - lse);
            const float keep = (drop.on && !DropoutKeep(row_state, uint32_t(j), drop.threshold)) ? 0.f : drop.keep_scale;
            float* dvrow = &dvf[j * dim];
            const float pd = pr * keep;
            for (int64_t d = 0; d < dim; ++d) dvrow[d] += pd * dorow[d];
            const float dp = Dot(dorow.data(), vrow, dim) * keep;
            const float dlogit = pr * (dp - delta);
            if (p.dbias) p.dbias[p.bias.Offset(b, h, i, j)] += dlogit;
            const float ds = dlogit * (plain ? m.scale : LogitGrad(m, raw));
            float* dkrow = &dkf[j * dim];
            for (int64_t d = 0; d < dim; ++d) {
              dqrow[d] += ds * krow[d];
              dkrow[d] += ds * qrow[d];
            }
          }
          for (int64_t d = 0; d < dim; ++d) dq[qo + d] = FromFloat<T>(dqrow[d]);
        }
      }
      for (int64_t j = 0; j < s.kv_len; ++j) {
        const int64_t ko = RowOffset(b, j, kvh, s.kv_len, s.kv_heads, dim);
        for (int64_t d = 0; d < dim; ++d) {
          dk[ko + d] = FromFloat<T>(dkf[j * dim + d]);
          dv[ko + d] = FromFloat<T>(dvf[j * dim + d]);
        }
      }
    }
  });
}

template <typename Args>
using Kernel = void (*)(const Args&, ffi::ThreadPool*);

template <typename Args>
ffi::Error Dispatch(const Args& p, ffi::ThreadPool* pool, Kernel<Args> f32, Kernel<Args> bf16,
                    Kernel<Args> f16) {
  switch (p.dtype) {
    case ffi::DataType::F32: f32(p, pool); break;
    case ffi::DataType::BF16: bf16(p, pool); break;
    case ffi::DataType::F16: f16(p, pool); break;
    default:
      return InvalidArg("jaxdnn attention", std::string("unsupported dtype ") + DtypeName(p.dtype));
  }
  return ffi::Error::Success();
}

}  // namespace

ffi::Error AttentionFwdCpu(const AttnFwdArgs& p, ffi::ThreadPool* pool) {
  return Dispatch<AttnFwdArgs>(p, pool, Forward<float>, Forward<bf16_t>, Forward<f16_t>);
}

ffi::Error AttentionBwdCpu(const AttnBwdArgs& p, ffi::ThreadPool* pool) {
  return Dispatch<AttnBwdArgs>(p, pool, Backward<float>, Backward<bf16_t>, Backward<f16_t>);
}

}  // namespace jaxdnn::attention
