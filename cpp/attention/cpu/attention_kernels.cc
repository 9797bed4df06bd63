// CPU attention: for each (batch, head) the keys and values are widened to
// float32 once; queries then go in blocks of kQBlock rows against blocks of
// kKeyBlock keys (attention/cpu/attention_tiles.h), with an online softmax (forward)
// or probabilities recomputed from the saved log-sum-exp (backward). Memory
// is O(kv_len * head_dim), never O(q_len * kv_len). Every sum runs in an
// order fixed by the shape alone, so results are deterministic.
#include "attention/cpu/attention_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "attention/cpu/attention_tiles.h"
#include "attention/mask.h"
#include "common/cpu_dispatch.h"
#include "common/cpu_parallel.h"
#include "common/host_half.h"

namespace jaxdnn::attention {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Split a problem with fewer (batch, head) items than this along the
// sequence, so a few heads still keep every thread busy. A constant, not the
// thread count: the split (and so every sum's order) depends on the shape only.
constexpr int64_t kMinItems = 8;

// Logit of (i, j) after bias, mask and segments; -inf when (i, j) is masked.
// `raw` receives the logit before the bias (for the softcap derivative).
struct LogitSource {
  const AttnMaskParams& m;
  const AttnShape& s;
  const Broadcast4& bias;
  ffi::DataType bias_dtype;
  const Broadcast4& mask;

  // Whether (i, j) is masked out (segments or the boolean mask), as opposed
  // to a logit that is -inf by itself, whose gradient still flows (NaN included).
  bool Masked(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return !SameSegment(m, s, b, i, j) ||
           (mask.data && !static_cast<const uint8_t*>(mask.data)[mask.Offset(b, h, i, j)]);
  }

  float operator()(int64_t b, int64_t h, int64_t i, int64_t j, float dot, float* raw) const {
    *raw = 0.f;
    if (Masked(b, h, i, j)) return kNegInf;
    float x = Logit(m, dot);
    *raw = x;
    if (bias.data) x += LoadAsFloat(bias.data, bias_dtype, bias.Offset(b, h, i, j));
    return x;
  }
};

// No per-pair rule beyond the key range: logits are just scaled products.
bool IsPlain(const AttnMaskParams& m, const Broadcast4& bias, const Broadcast4& mask) {
  return !m.q_segments && !m.kv_segments && !bias.data && !mask.data && !(m.softcap > 0.f);
}

// The rows of one query tile: each row's key range, and the union of them.
struct QueryTile {
  int64_t i0 = 0, rows = 0;
  KeyRange row[kQBlock];
  int64_t lo = 0, hi = 0;  // union of the non-empty ranges, clipped to [k_lo, k_hi)

  QueryTile(const AttnMaskParams& m, const AttnShape& s, int64_t b, int64_t i0_, int64_t k_lo, int64_t k_hi)
      : i0(i0_), rows(std::min(kQBlock, s.q_len - i0_)), lo(k_hi), hi(k_lo) {
    for (int64_t r = 0; r < rows; ++r) {
      KeyRange kr = AllowedKeys(m, s, b, i0 + r);
      kr.lo = std::max(kr.lo, k_lo);
      kr.hi = std::min(kr.hi, k_hi);
      if (kr.hi <= kr.lo) kr.lo = kr.hi = 0;
      row[r] = kr;
      if (kr.hi > kr.lo) {
        lo = std::min(lo, kr.lo);
        hi = std::max(hi, kr.hi);
      }
    }
  }
  // The tile's key blocks start at multiples of kKeyBlock.
  int64_t first_block() const { return lo / kKeyBlock * kKeyBlock; }
};

// Number of equal parts (of whole blocks) to split `len` into, given `items`.
int64_t Parts(int64_t items, int64_t len, int64_t block, int64_t min_blocks) {
  const int64_t want = (kMinItems + items - 1) / items;
  const int64_t most = std::max<int64_t>(1, (len + block - 1) / block / min_blocks);
  return std::max<int64_t>(1, std::min(want, most));
}

template <typename T>
void Forward(const AttnFwdArgs& p, ffi::ThreadPool* pool) {
  const AttnShape& s = p.shape;
  const int64_t dim = s.head_dim, group = s.group();
  const int64_t kv_pad = RoundUp(s.kv_len, kKeyBlock);
  const AttnMaskParams& m = p.mask_params;
  const LogitSource logit{m, s, p.bias, p.bias_dtype, p.mask};
  const bool plain = IsPlain(m, p.bias, p.mask);
  const DropoutPlan drop(m);
  const T* q = static_cast<const T*>(p.q);
  T* out = static_cast<T*>(p.out);
  // Query rows are independent, so parts of the query axis are items too.
  const int64_t parts = Parts(s.batch * s.heads, s.q_len, kQBlock, 4);
  const int64_t part_len = RoundUp((s.q_len + parts - 1) / parts, kQBlock);

  // One work item per (batch, query head, part of the queries): its rows are its own outputs.
  ParallelFor(pool, s.batch * s.heads * parts, [&](int64_t item) {
    const int64_t part = item % parts, bh = item / parts;
    const int64_t b = bh / s.heads, h = bh % s.heads, kvh = h / group;
    const int64_t i_begin = part * part_len, i_end = std::min(s.q_len, i_begin + part_len);
    if (i_begin >= i_end) return;
    std::vector<float> kt, vf, qf(kQBlock * dim), acc(kQBlock * dim), tile(kQBlock * kKeyBlock),
        w(kQBlock * kKeyBlock);
    // A paged cache is read only within the row's context: blocks past it
    // may be stale or belong to another sequence.
    const int64_t kv_read = p.paged.on() ? ClampLength(m.kv_lengths, b, s.kv_len) : s.kv_len;
    WidenPanels(static_cast<const T*>(p.k), b, kvh, kv_read, s.kv_heads, dim, kv_pad, kt, p.paged);
    WidenRows(static_cast<const T*>(p.v), b, kvh, kv_read, s.kv_heads, dim, kv_pad, vf, p.paged);
    // A masked key's value row must add nothing even when it is not finite
    // (a padded cache): then rows skip their zero weights one by one.
    const bool v_finite = AllFinite(vf.data(), vf.size());
    for (int64_t i0 = i_begin; i0 < i_end; i0 += kQBlock) {
      const QueryTile qt(m, s, b, i0, 0, s.kv_len);
      std::fill(qf.begin(), qf.end(), 0.f);
      for (int64_t r = 0; r < qt.rows; ++r) {
        const T* qrow = q + RowOffset(b, i0 + r, h, s.q_len, s.heads, dim);
        for (int64_t d = 0; d < dim; ++d) qf[r * dim + d] = ToFloat(qrow[d]);
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      float run_max[kQBlock], run_sum[kQBlock];
      uint32_t row_state[kQBlock];
      bool nan_logit[kQBlock];  // a NaN logit among the row's keys: the row is NaN, as the reference's
      for (int64_t r = 0; r < qt.rows; ++r) {
        run_max[r] = kNegInf;
        run_sum[r] = 0.f;
        nan_logit[r] = false;
        row_state[r] = drop.on ? DropoutRowState(m.seeds + 2 * b, uint32_t(h), uint32_t(i0 + r)) : 0;
      }
      for (int64_t j0 = qt.first_block(); j0 < qt.hi; j0 += kKeyBlock) {
        ScoreTile(qf.data(), dim, &kt[j0 * dim], tile.data());
        std::fill(w.begin(), w.end(), 0.f);
        for (int64_t r = 0; r < qt.rows; ++r) {
          const int64_t i = i0 + r;
          // This row's keys within the block: t in [t0, t1).
          const int64_t t0 = std::max<int64_t>(qt.row[r].lo - j0, 0);
          const int64_t t1 = std::min<int64_t>(qt.row[r].hi - j0, kKeyBlock);
          if (t1 <= t0) continue;
          float* x = &tile[r * kKeyBlock];
          float block_max = kNegInf;
          if (plain) {
            block_max = ScaleAndMax(x + t0, t1 - t0, m.scale);
          } else {
            for (int64_t t = t0; t < t1; ++t) {
              float raw;
              x[t] = logit(b, h, i, j0 + t, x[t], &raw);
              block_max = std::max(block_max, x[t]);
            }
          }
          // The max passes NaNs over, so look for them: a NaN logit makes the row NaN.
          nan_logit[r] = nan_logit[r] || std::any_of(x + t0, x + t1, [](float v) { return std::isnan(v); });
          if (block_max == kNegInf) continue;
          const float new_max = std::max(run_max[r], block_max);
          const float correction = run_max[r] == kNegInf ? 0.f : std::exp(run_max[r] - new_max);
          float sum = run_sum[r] * correction;
          float* a = &acc[r * dim];
          for (int64_t d = 0; d < dim; ++d) a[d] *= correction;
          sum += SoftmaxWeights(x + t0, t1 - t0, new_max, &w[r * kKeyBlock + t0], drop, row_state[r],
                                uint32_t(j0 + t0));
          run_sum[r] = sum;
          run_max[r] = new_max;
        }
        const int64_t n = std::min(kKeyBlock, qt.hi - j0);
        if (v_finite) {
          RowSumTile(acc.data(), w.data(), &vf[j0 * dim], n, dim);
        } else {
          for (int64_t r = 0; r < qt.rows; ++r) {
            WeightedRowSum(&acc[r * dim], &w[r * kKeyBlock], &vf[j0 * dim], n, dim);
          }
        }
      }
      for (int64_t r = 0; r < qt.rows; ++r) {
        const int64_t i = i0 + r;
        // As the reference: a NaN logit makes the row and its lse NaN; a +inf
        // logit makes the row NaN (inf - inf in the softmax) and the lse +inf.
        const bool pos_inf = run_max[r] == -kNegInf;
        const bool poisoned = nan_logit[r] || pos_inf;
        const bool empty = !poisoned && !(run_sum[r] > 0.f);
        const float inv = empty ? 0.f : 1.f / run_sum[r];
        T* orow = out + RowOffset(b, i, h, s.q_len, s.heads, dim);
        for (int64_t d = 0; d < dim; ++d) {
          orow[d] = FromFloat<T>(poisoned ? std::numeric_limits<float>::quiet_NaN() : acc[r * dim + d] * inv);
        }
        p.lse[(b * s.heads + h) * s.q_len + i] = nan_logit[r] ? std::numeric_limits<float>::quiet_NaN()
                                                 : pos_inf    ? -kNegInf
                                                 : empty      ? kNegInf
                                                              : run_max[r] + std::log(run_sum[r]);
      }
    }
  });
}

template <typename T>
void Backward(const AttnBwdArgs& p, ffi::ThreadPool* pool) {
  const AttnShape& s = p.shape;
  const int64_t dim = s.head_dim, group = s.group();
  const int64_t kv_pad = RoundUp(s.kv_len, kKeyBlock);
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
  // One work item per (batch, kv head, part of the keys): it owns those
  // keys' dK/dV. With one part it also owns its query heads' dQ; with more,
  // each part leaves its dQ terms in a float32 buffer and a second pass adds
  // the parts in order. A bias gradient that broadcasts over batch or heads
  // is shared between items: one broadcast over the batch only is split by
  // kv head, each item taking its batch rows in order; one broadcast over
  // heads runs every item in order on one thread. (A bias gradient keeps the
  // keys in one part.) Either way each element's terms come in (b, h, i, j)
  // order, as on one thread.
  const bool dbias_over_batch = p.dbias && p.bias.dims[0] != s.batch;
  const bool dbias_over_heads = p.dbias && p.bias.dims[1] != s.heads;
  const int64_t parts = p.dbias ? 1 : Parts(s.batch * s.kv_heads, s.kv_len, kKeyBlock, 2);
  const int64_t part_len = RoundUp((s.kv_len + parts - 1) / parts, kKeyBlock);
  const int64_t q_elems = s.q_len * dim;  // one (batch, head)'s dQ
  // Not zeroed: every part writes all of its rows.
  std::unique_ptr<float[]> dq_parts(parts > 1 ? new float[s.batch * s.heads * parts * q_elems] : nullptr);

  auto run_item = [&](int64_t b, int64_t kvh, int64_t part) {
    const int64_t k_lo = std::min(s.kv_len, part * part_len);
    const int64_t k_hi = std::min(s.kv_len, k_lo + part_len);
    std::vector<float> kt, kf, vt, dkf(kv_pad * dim, 0.f), dvf(kv_pad * dim, 0.f);
    std::vector<float> qf(kQBlock * dim), dof(kQBlock * dim), dqf(kQBlock * dim);
    std::vector<float> tile(kQBlock * kKeyBlock), dp(kQBlock * kKeyBlock);
    WidenPanels(static_cast<const T*>(p.k), b, kvh, s.kv_len, s.kv_heads, dim, kv_pad, kt);
    WidenRows(static_cast<const T*>(p.k), b, kvh, s.kv_len, s.kv_heads, dim, kv_pad, kf);
    WidenPanels(static_cast<const T*>(p.v), b, kvh, s.kv_len, s.kv_heads, dim, kv_pad, vt);
    // Whole-tile sums add zero weights too; a non-finite row (a padded,
    // masked position) must add nothing, so then zero weights are skipped.
    const bool k_finite = AllFinite(kf.data(), kf.size());
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      float* dq_part = parts > 1 ? &dq_parts[((b * s.heads + h) * parts + part) * q_elems] : nullptr;
      for (int64_t i0 = 0; i0 < s.q_len; i0 += kQBlock) {
        const QueryTile qt(m, s, b, i0, k_lo, k_hi);
        float lse[kQBlock], delta[kQBlock];
        uint32_t row_state[kQBlock];
        std::fill(qf.begin(), qf.end(), 0.f);
        std::fill(dof.begin(), dof.end(), 0.f);
        std::fill(dqf.begin(), dqf.end(), 0.f);
        for (int64_t r = 0; r < qt.rows; ++r) {
          const int64_t i = i0 + r;
          const int64_t qo = RowOffset(b, i, h, s.q_len, s.heads, dim);
          const int64_t stat = (b * s.heads + h) * s.q_len + i;
          lse[r] = p.lse[stat];
          float dl = 0.f;  // rowsum(dO * O) minus the log-sum-exp cotangent
          for (int64_t d = 0; d < dim; ++d) {
            qf[r * dim + d] = ToFloat(q[qo + d]);
            dof[r * dim + d] = ToFloat(dout[qo + d]);
            dl += dof[r * dim + d] * ToFloat(o[qo + d]);
          }
          if (p.dlse) dl -= p.dlse[stat];
          delta[r] = dl;
          row_state[r] = drop.on ? DropoutRowState(m.seeds + 2 * b, uint32_t(h), uint32_t(i)) : 0;
        }
        const bool q_finite = AllFinite(qf.data(), qf.size()) && AllFinite(dof.data(), dof.size());
        for (int64_t j0 = qt.first_block(); j0 < qt.hi; j0 += kKeyBlock) {
          ScoreTile(qf.data(), dim, &kt[j0 * dim], tile.data());
          ScoreTile(dof.data(), dim, &vt[j0 * dim], dp.data());
          // tile becomes the dropout-scaled probabilities, dp the logit gradients.
          for (int64_t r = 0; r < kQBlock; ++r) {
            const int64_t i = i0 + r;
            float* pt = &tile[r * kKeyBlock];
            float* gt = &dp[r * kKeyBlock];
            const int64_t t0 = r < qt.rows ? std::max<int64_t>(qt.row[r].lo - j0, 0) : 0;
            int64_t t1 = r < qt.rows ? std::min<int64_t>(qt.row[r].hi - j0, kKeyBlock) : 0;
            if (r < qt.rows && lse[r] == kNegInf) t1 = t0;
            if (plain && !p.dbias) {
              // Zeros outside the row's keys [lo, hi) = [t0, t1) clipped to the block.
              const int64_t lo = std::min(t0, kKeyBlock), hi = std::max(lo, t1);
              std::fill(pt, pt + lo, 0.f);
              std::fill(gt, gt + lo, 0.f);
              if (hi > lo) {
                PlainGradients(pt + lo, gt + lo, hi - lo, m.scale, lse[r], delta[r], drop, row_state[r],
                               uint32_t(j0 + lo));
              }
              std::fill(pt + hi, pt + kKeyBlock, 0.f);
              std::fill(gt + hi, gt + kKeyBlock, 0.f);
              continue;
            }
            for (int64_t t = 0; t < kKeyBlock; ++t) {
              if (t < t0 || t >= t1) {
                pt[t] = gt[t] = 0.f;
                continue;
              }
              const int64_t j = j0 + t;
              float raw = 0.f;
              const float x = plain ? pt[t] * m.scale : logit(b, h, i, j, pt[t], &raw);
              if (x == kNegInf && !plain && logit.Masked(b, h, i, j)) {
                pt[t] = gt[t] = 0.f;
                continue;
              }
              const float pr = std::exp(x - lse[r]);
              const float keep = (drop.on && !DropoutKeep(row_state[r], uint32_t(j), drop.threshold))
                                     ? 0.f
                                     : drop.keep_scale;
              const float dlogit = pr * (gt[t] * keep - delta[r]);
              if (p.dbias) p.dbias[p.bias.Offset(b, h, i, j)] += dlogit;
              pt[t] = pr * keep;
              gt[t] = dlogit * (plain ? m.scale : LogitGrad(m, raw));
            }
          }
          const int64_t n = std::min(kKeyBlock, qt.hi - j0);
          if (q_finite) {
            ColumnSumTile(&dvf[j0 * dim], tile.data(), dof.data(), dim);
            ColumnSumTile(&dkf[j0 * dim], dp.data(), qf.data(), dim);
          } else {
            WeightedColumnSum(&dvf[j0 * dim], tile.data(), dof.data(), qt.rows, n, dim);
            WeightedColumnSum(&dkf[j0 * dim], dp.data(), qf.data(), qt.rows, n, dim);
          }
          if (k_finite) {
            RowSumTile(dqf.data(), dp.data(), &kf[j0 * dim], n, dim);
          } else {
            for (int64_t r = 0; r < qt.rows; ++r) {
              WeightedRowSum(&dqf[r * dim], &dp[r * kKeyBlock], &kf[j0 * dim], n, dim);
            }
          }
        }
        for (int64_t r = 0; r < qt.rows; ++r) {
          const int64_t i = i0 + r;
          if (dq_part) {
            std::copy(&dqf[r * dim], &dqf[r * dim] + dim, dq_part + i * dim);
          } else {
            T* dqrow = dq + RowOffset(b, i, h, s.q_len, s.heads, dim);
            for (int64_t d = 0; d < dim; ++d) dqrow[d] = FromFloat<T>(dqf[r * dim + d]);
          }
        }
      }
    }
    for (int64_t j = k_lo; j < k_hi; ++j) {
      const int64_t ko = RowOffset(b, j, kvh, s.kv_len, s.kv_heads, dim);
      for (int64_t d = 0; d < dim; ++d) {
        dk[ko + d] = FromFloat<T>(dkf[j * dim + d]);
        dv[ko + d] = FromFloat<T>(dvf[j * dim + d]);
      }
    }
  };
  if (dbias_over_heads) {
    for (int64_t bkv = 0; bkv < s.batch * s.kv_heads; ++bkv) run_item(bkv / s.kv_heads, bkv % s.kv_heads, 0);
  } else if (dbias_over_batch) {
    ParallelFor(pool, s.kv_heads, [&](int64_t kvh) {
      for (int64_t b = 0; b < s.batch; ++b) run_item(b, kvh, 0);
    });
  } else {
    ParallelFor(pool, s.batch * s.kv_heads * parts, [&](int64_t item) {
      const int64_t bkv = item / parts;
      run_item(bkv / s.kv_heads, bkv % s.kv_heads, item % parts);
    });
  }
  if (parts == 1) return;
  // dQ: the parts' terms added in part order (fixed by the shape).
  ParallelFor(pool, s.batch * s.heads, [&](int64_t bh) {
    const int64_t b = bh / s.heads, h = bh % s.heads;
    const float* src = &dq_parts[bh * parts * q_elems];
    std::vector<float> sum(dim);
    for (int64_t i = 0; i < s.q_len; ++i) {
      std::fill(sum.begin(), sum.end(), 0.f);
      for (int64_t c = 0; c < parts; ++c) {
        for (int64_t d = 0; d < dim; ++d) sum[d] += src[c * q_elems + i * dim + d];
      }
      T* dqrow = dq + RowOffset(b, i, h, s.q_len, s.heads, dim);
      for (int64_t d = 0; d < dim; ++d) dqrow[d] = FromFloat<T>(sum[d]);
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
    default: return InvalidArg("jaxdnn attention", std::string("unsupported dtype ") + DtypeName(p.dtype));
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
