// The `ext` mode of sm90_attention_bwd_selftest: the Hopper two-kernel
// backward's extended (masked) path (padding lengths, bottom-right causal,
// sliding windows, segment ids, softcap) against a naive fp32 reference on the
// GPU that calls the rules of attention/mask.h (AllowedKeys,
// SameSegment, Logit, LogitGrad) directly. out and lse come from the sm90
// forward's extended path. Per case: max |err| / max |ref| and relative L2 per
// gradient, the count of elements the mask zeroes in the reference but not in
// the kernel, non-finite values, determinism (two poisoned runs compared
// bytewise) and the other block-order variants against the same reference.
// Then a timing of packed documents (batch 2, seq 8192, 16 heads, d128,
// causal, documents ~1024 long) next to the dense causal backward.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "attention/mask.h"
#include "attention/problem.h"
#include "attention/sm90/backward.h"
#include "attention/sm90/backward_fused.h"
#include "attention/sm90/forward.h"
#include "attention/sm90/forward_workspace.h"
#include "../common/selftest_util.cuh"

namespace sm90_bwd_ext {

using jaxdnn::attention::AllowedKeys;
using jaxdnn::attention::AttnBwdArgs;
using jaxdnn::attention::AttnFwdArgs;
using jaxdnn::attention::AttnMaskParams;
using jaxdnn::attention::AttnShape;
using jaxdnn::attention::KeyRange;
using jaxdnn::attention::Logit;
using jaxdnn::attention::LogitGrad;
using jaxdnn::attention::SameSegment;
using sm90_selftest::HostToF;
using sm90_selftest::ToF;

__device__ __forceinline__ float ExtWarpSum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// One warp per (b, h, i) query row: dq (fp32) over the row's allowed keys.
template <typename T>
__global__ void RefDqMasked(const T* q, const T* k, const T* v, const T* out, const T* dout, const float* lse,
                            float* delta, float* dq, AttnShape sh, AttnMaskParams m) {
  const int64_t row_id = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row_id >= sh.batch * sh.heads * sh.q_len) return;
  const int64_t i = row_id % sh.q_len;
  const int64_t h = (row_id / sh.q_len) % sh.heads;
  const int64_t b = row_id / (sh.q_len * sh.heads);
  const int64_t hk = h / sh.group();
  const int D = static_cast<int>(sh.head_dim), per = D / 32;
  const int64_t qo = ((b * sh.q_len + i) * sh.heads + h) * D + lane * per;
  float qr[8], dor[8], acc[8] = {};  // per = D / 32 <= 8 (head dim <= 256)
  float dl = 0.f;
  for (int d = 0; d < 8; ++d) {
    qr[d] = d < per ? ToF(q[qo + d]) : 0.f;
    dor[d] = d < per ? ToF(dout[qo + d]) : 0.f;
    if (d < per) dl += dor[d] * ToF(out[qo + d]);
  }
  dl = ExtWarpSum(dl);
  const float l = lse[(b * sh.heads + h) * sh.q_len + i];
  const KeyRange r = AllowedKeys(m, sh, b, i);
  for (int64_t j = r.lo; j < r.hi; ++j) {
    if (!SameSegment(m, sh, b, i, j)) continue;
    const int64_t kvo = ((b * sh.kv_len + j) * sh.kv_heads + hk) * D + lane * per;
    float sd = 0.f, pd = 0.f;
    for (int d = 0; d < per; ++d) {
      sd += qr[d] * ToF(k[kvo + d]);
      pd += dor[d] * ToF(v[kvo + d]);
    }
    sd = ExtWarpSum(sd);
    pd = ExtWarpSum(pd);
    const float logit = Logit(m, sd);
    const float pj = expf(logit - l);
    const float g = pj * (pd - dl) * LogitGrad(m, logit);
    for (int d = 0; d < per; ++d) acc[d] += g * ToF(k[kvo + d]);
  }
  for (int d = 0; d < per; ++d) dq[qo + d] = acc[d];
  if (lane == 0) delta[(b * sh.heads + h) * sh.q_len + i] = dl;
}

// One warp per (b, hk, j) key row: dk, dv (fp32) over the queries that may
// see key j, summing the group's heads.
template <typename T>
__global__ void RefDkDvMasked(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                              const float* delta, float* dk, float* dv, AttnShape sh, AttnMaskParams m) {
  const int64_t row_id = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row_id >= sh.batch * sh.kv_heads * sh.kv_len) return;
  const int64_t j = row_id % sh.kv_len;
  const int64_t hk = (row_id / sh.kv_len) % sh.kv_heads;
  const int64_t b = row_id / (sh.kv_len * sh.kv_heads);
  const int64_t group = sh.group();
  const int D = static_cast<int>(sh.head_dim), per = D / 32;
  const int64_t kvo = ((b * sh.kv_len + j) * sh.kv_heads + hk) * D + lane * per;
  float kr[8], vr[8], ak[8] = {}, av[8] = {};
  for (int d = 0; d < 8; ++d) {
    kr[d] = d < per ? ToF(k[kvo + d]) : 0.f;
    vr[d] = d < per ? ToF(v[kvo + d]) : 0.f;
  }
  for (int64_t i = 0; i < sh.q_len; ++i) {
    const KeyRange r = AllowedKeys(m, sh, b, i);
    if (j < r.lo || j >= r.hi || !SameSegment(m, sh, b, i, j)) continue;
    for (int64_t gi = 0; gi < group; ++gi) {
      const int64_t h = hk * group + gi;
      const int64_t qo = ((b * sh.q_len + i) * sh.heads + h) * D + lane * per;
      float sd = 0.f, pd = 0.f;
      for (int d = 0; d < per; ++d) {
        sd += kr[d] * ToF(q[qo + d]);
        pd += vr[d] * ToF(dout[qo + d]);
      }
      sd = ExtWarpSum(sd);
      pd = ExtWarpSum(pd);
      const int64_t lo = (b * sh.heads + h) * sh.q_len + i;
      const float logit = Logit(m, sd);
      const float pj = expf(logit - lse[lo]);
      const float g = pj * (pd - delta[lo]) * LogitGrad(m, logit);
      for (int d = 0; d < per; ++d) {
        av[d] += pj * ToF(dout[qo + d]);
        ak[d] += g * ToF(q[qo + d]);
      }
    }
  }
  for (int d = 0; d < per; ++d) {
    dk[kvo + d] = ak[d];
    dv[kvo + d] = av[d];
  }
}

struct ExtCase {
  std::string name;
  int B, Sq, Skv, H, Hk, D;
  bool causal, f16;
  int window_left = -1, window_right = -1;
  float softcap = 0.f, scale = 0.f;        // scale 0: 1 / sqrt(D)
  std::vector<int> q_lengths, kv_lengths;  // per batch; empty: none
  std::vector<int> docs;                   // document lengths (segment ids, q and kv alike); empty: none
  bool check = true;                       // reference comparison; else finite + determinism + timing
  bool scattered_ids = false;              // with docs: ids 3..5 in short runs, not contiguous documents
  int variant = -1;  // fused paths: the launcher's variant (404: 80-query segment steps)
};

// Segment ids of one batch row: document d gets id 10 * d + 3 (ids need not
// start at 0); the last document runs to the end.
std::vector<int32_t> DocIds(const std::vector<int>& docs, int len, int batch_row) {
  std::vector<int32_t> ids(len);
  int pos = 0, d = 0;
  // Batch rows after the first start one document later (not all alike).
  size_t di = batch_row % std::max<size_t>(docs.size(), 1);
  while (pos < len) {
    const int n = docs.empty() ? len : docs[di % docs.size()];
    for (int x = 0; x < n && pos < len; ++x) ids[pos++] = 10 * d + 3;
    ++d;
    ++di;
  }
  return ids;
}

struct GradErr {
  double max_abs = 0, ref_max = 0, rel_l2 = 0;
  long long nonfinite = 0, unmasked = 0;  // unmasked: a row the mask empties but not exactly 0
  double MaxRel() const { return max_abs / std::max(ref_max, 1e-30); }
};

// got vs ref; `live[e / row_elems]`: whether the element's row (query row for
// dq, key row for dk/dv) has any allowed pair (else it must be exactly 0).
// The relative L2 has an rms floor of 1e-3 (a gradient that is all but zero,
// e.g. dq of rows with one key, where dS = P (dP - delta) cancels).
GradErr CompareMasked(const std::vector<uint16_t>& got, const std::vector<float>& ref, bool f16,
                      const std::vector<char>& live, size_t row_elems) {
  GradErr e;
  double l2 = 0, r2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = HostToF(got[i], f16);
    if (!std::isfinite(g)) {
      ++e.nonfinite;
      continue;
    }
    if (!live[i / row_elems] && g != 0.f) ++e.unmasked;
    const double d = static_cast<double>(g) - ref[i];
    e.max_abs = std::max(e.max_abs, std::fabs(d));
    e.ref_max = std::max(e.ref_max, std::fabs(static_cast<double>(ref[i])));
    l2 += d * d;
    r2 += static_cast<double>(ref[i]) * ref[i];
  }
  e.rel_l2 = std::sqrt(l2 / std::max(r2, 1e-6 * static_cast<double>(got.size())));
  return e;
}

// On the host, by attention/mask.h: the allowed (query, key) pairs, and which
// query rows [b * Sq + i] and key rows [b * Skv + j] have any.
struct HostMask {
  double pairs = 0;
  std::vector<char> row_live, key_live;
};

HostMask CountPairs(const AttnMaskParams& hm, const AttnShape& sh) {
  HostMask h;
  h.row_live.assign(sh.batch * sh.q_len, 0);
  h.key_live.assign(sh.batch * sh.kv_len, 0);
  for (int64_t b = 0; b < sh.batch; ++b) {
    for (int64_t i = 0; i < sh.q_len; ++i) {
      const KeyRange r = AllowedKeys(hm, sh, b, i);
      for (int64_t j = r.lo; j < r.hi; ++j) {
        if (!SameSegment(hm, sh, b, i, j)) continue;
        h.pairs += 1;
        h.row_live[b * sh.q_len + i] = 1;
        h.key_live[b * sh.kv_len + j] = 1;
      }
    }
  }
  return h;
}

bool GradOk(const GradErr& e) { return e.rel_l2 <= 2e-2 && e.nonfinite == 0 && e.unmasked == 0; }

// Device buffers of one case.
struct ExtBuffers {
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *dout = nullptr, *dq = nullptr, *dk = nullptr,
       *dv = nullptr;
  float *lse = nullptr, *ws = nullptr, *fwd_ws = nullptr;
  int32_t *qlen = nullptr, *kvlen = nullptr, *qseg = nullptr, *kvseg = nullptr;
  ~ExtBuffers() {
    for (void* p : {q, k, v, o, dout, dq, dk, dv, static_cast<void*>(lse), static_cast<void*>(ws),
                    static_cast<void*>(fwd_ws), static_cast<void*>(qlen), static_cast<void*>(kvlen),
                    static_cast<void*>(qseg), static_cast<void*>(kvseg)}) {
      if (p != nullptr) cudaFree(p);
    }
  }
};

template <typename T>
void UploadInts(int32_t** dst, const std::vector<T>& v) {
  CHECK_CUDA(cudaMalloc(dst, v.size() * 4));
  std::vector<int32_t> tmp(v.begin(), v.end());
  CHECK_CUDA(cudaMemcpy(*dst, tmp.data(), tmp.size() * 4, cudaMemcpyHostToDevice));
}

// Which backward a case runs: the two-kernel one (the ext and d256 modes) or
// the fused one with segment ids (the seg mode), ordered or unordered dQ.
enum class BwdPath { kTwoKernel, kFusedOrdered, kFusedUnordered };

inline jaxdnn::LaunchStatus LaunchPath(const AttnBwdArgs& a, cudaStream_t stream, BwdPath path,
                                       int variant = -1) {
  if (path == BwdPath::kTwoKernel)
    return jaxdnn::attention::LaunchAttentionBwdSm90Variant(a, stream, variant);
  return jaxdnn::attention::LaunchAttentionBwdSm90FusedVariant(a, stream, variant);
}

// Median time of 10 backward launches (after 3 warm-ups), ms.
inline double TimeBackward(const AttnBwdArgs& a, cudaStream_t stream, BwdPath path = BwdPath::kTwoKernel,
                           int variant = -1) {
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) CHECK_CUDA(LaunchPath(a, stream, path, variant));
  std::vector<float> ms(10);
  for (int i = 0; i < 10; ++i) {
    CHECK_CUDA(cudaEventRecord(e0, stream));
    CHECK_CUDA(LaunchPath(a, stream, path, variant));
    CHECK_CUDA(cudaEventRecord(e1, stream));
    CHECK_CUDA(cudaEventSynchronize(e1));
    CHECK_CUDA(cudaEventElapsedTime(&ms[i], e0, e1));
  }
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return 0.5 * (ms[4] + ms[5]);
}

// Segment ids 3..5 in runs of 1-9 tokens, the same function of the position
// in every batch row: ids recur (not contiguous documents), so the fused
// backward's step votes are conservative and its element mask does the work.
inline std::vector<int32_t> ScatteredIds(int len) {
  std::vector<int32_t> ids(len);
  uint32_t x = 12345u;
  for (int pos = 0; pos < len;) {
    x = x * 1664525u + 1013904223u;
    const int run = 1 + static_cast<int>((x >> 20) % 9), id = 3 + static_cast<int>((x >> 8) % 3);
    for (int r = 0; r < run && pos < len; ++r) ids[pos++] = id;
  }
  return ids;
}

// Runs one case; prints one line (plus failing variants); returns pass.
// Fused paths: c.variant (-1: the default; with segments only bits 256 | 128
// count, the 80-query steps of the unordered mode), a
// third poisoned run (ordered: bytewise; unordered: dK, dV bytewise), and the
// timing next to the two-kernel backward.
bool RunExtCase(const ExtCase& c, cudaStream_t stream, BwdPath path = BwdPath::kTwoKernel) {
  const bool f16 = c.f16;
  const bool fused = path != BwdPath::kTwoKernel;
  const bool unordered = path == BwdPath::kFusedUnordered;
  const size_t nq = static_cast<size_t>(c.B) * c.Sq * c.H * c.D;
  const size_t nkv = static_cast<size_t>(c.B) * c.Skv * c.Hk * c.D;
  const size_t nl = static_cast<size_t>(c.B) * c.H * c.Sq;
  int64_t ws_elems = static_cast<int64_t>(nl) + 2 * static_cast<int64_t>(c.B) * c.Skv * c.H * c.D;
  if (fused) {
    AttnShape sh;
    sh.batch = c.B;
    sh.q_len = c.Sq;
    sh.kv_len = c.Skv;
    sh.heads = c.H;
    sh.kv_heads = c.Hk;
    sh.head_dim = c.D;
    ws_elems = std::max(ws_elems, jaxdnn::attention::Sm90FusedBwdWorkspaceElems(sh));
  }
  const std::string label = c.name + (fused ? (unordered ? " [fused unord]" : " [fused ord]") : "") +
                            (fused && c.variant >= 0 ? " v" + std::to_string(c.variant) : "");
  std::fprintf(stderr, "[running %s]\n", label.c_str());

  ExtBuffers d;
  CHECK_CUDA(cudaMalloc(&d.q, nq * 2));
  CHECK_CUDA(cudaMalloc(&d.o, nq * 2));
  CHECK_CUDA(cudaMalloc(&d.dout, nq * 2));
  CHECK_CUDA(cudaMalloc(&d.dq, nq * 2));
  CHECK_CUDA(cudaMalloc(&d.k, nkv * 2));
  CHECK_CUDA(cudaMalloc(&d.v, nkv * 2));
  CHECK_CUDA(cudaMalloc(&d.dk, nkv * 2));
  CHECK_CUDA(cudaMalloc(&d.dv, nkv * 2));
  CHECK_CUDA(cudaMalloc(&d.lse, nl * 4));
  CHECK_CUDA(cudaMalloc(&d.ws, ws_elems * 4));
  {
    const auto hq = sm90_selftest::RandomBits(nq, f16), hdo = sm90_selftest::RandomBits(nq, f16);
    const auto hk = sm90_selftest::RandomBits(nkv, f16), hv = sm90_selftest::RandomBits(nkv, f16);
    CHECK_CUDA(cudaMemcpy(d.q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d.dout, hdo.data(), nq * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d.k, hk.data(), nkv * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d.v, hv.data(), nkv * 2, cudaMemcpyHostToDevice));
  }

  AttnFwdArgs fa{};
  fa.shape.batch = c.B;
  fa.shape.q_len = c.Sq;
  fa.shape.kv_len = c.Skv;
  fa.shape.heads = c.H;
  fa.shape.kv_heads = c.Hk;
  fa.shape.head_dim = c.D;
  fa.dtype = f16 ? jaxdnn::ffi::DataType::F16 : jaxdnn::ffi::DataType::BF16;
  fa.q = d.q;
  fa.k = d.k;
  fa.v = d.v;
  AttnMaskParams& m = fa.mask_params;
  m.scale = c.scale > 0.f ? c.scale : 1.f / std::sqrt(static_cast<float>(c.D));
  m.causal = c.causal;
  m.window_left = c.window_left;
  m.window_right = c.window_right;
  m.softcap = c.softcap;
  if (!c.q_lengths.empty()) {
    UploadInts(&d.qlen, c.q_lengths);
    m.q_lengths = d.qlen;
  }
  if (!c.kv_lengths.empty()) {
    UploadInts(&d.kvlen, c.kv_lengths);
    m.kv_lengths = d.kvlen;
  }
  // Host copies of lengths and segment ids, for the mask on the host.
  std::vector<int32_t> hq_seg, hkv_seg, hql(c.q_lengths.begin(), c.q_lengths.end()),
      hkvl(c.kv_lengths.begin(), c.kv_lengths.end());
  if (!c.docs.empty()) {
    for (int b = 0; b < c.B; ++b) {
      const auto x = c.scattered_ids ? ScatteredIds(c.Sq) : DocIds(c.docs, c.Sq, b);
      const auto y = c.scattered_ids ? ScatteredIds(c.Skv) : DocIds(c.docs, c.Skv, b);
      hq_seg.insert(hq_seg.end(), x.begin(), x.end());
      hkv_seg.insert(hkv_seg.end(), y.begin(), y.end());
    }
    UploadInts(&d.qseg, hq_seg);
    UploadInts(&d.kvseg, hkv_seg);
    m.q_segments = d.qseg;
    m.kv_segments = d.kvseg;
  }
  fa.out = d.o;
  fa.lse = d.lse;
  // The forward's workspace as the plan sizes it (cpp/attention/plan.cc): the
  // tile counter, then the segment ranges its producer votes from.
  fa.workspace_elems =
      jaxdnn::attention::kSm90TileCounterElems + jaxdnn::attention::sm90::SegmentRangeInts(c.B, c.Sq, c.Skv);
  CHECK_CUDA(cudaMalloc(&d.fwd_ws, fa.workspace_elems * 4));
  CHECK_CUDA(cudaMemset(d.fwd_ws, 0, fa.workspace_elems * 4));
  fa.workspace = d.fwd_ws;
  if (!jaxdnn::attention::Sm90ForwardSupports(fa)) {
    std::printf("%-44s FAIL: Sm90ForwardSupports() is false\n", c.name.c_str());
    return false;
  }
  CHECK_CUDA(jaxdnn::attention::LaunchAttentionFwdSm90(fa, stream));

  AttnBwdArgs a{};
  a.shape = fa.shape;
  a.dtype = fa.dtype;
  a.q = d.q;
  a.k = d.k;
  a.v = d.v;
  a.out = d.o;
  a.lse = d.lse;
  a.dout = d.dout;
  a.mask_params = m;
  a.dq = d.dq;
  a.dk = d.dk;
  a.dv = d.dv;
  a.workspace = d.ws;
  a.workspace_elems = ws_elems;
  a.deterministic = !unordered;
  if (!jaxdnn::attention::Sm90BackwardSupports(a) || !jaxdnn::attention::Sm90BackwardNeedsMasking(a)) {
    std::printf("%-44s FAIL: Sm90BackwardSupports() %d, Sm90BackwardNeedsMasking() %d\n", c.name.c_str(),
                jaxdnn::attention::Sm90BackwardSupports(a), jaxdnn::attention::Sm90BackwardNeedsMasking(a));
    return false;
  }
  if (fused && (!jaxdnn::attention::Sm90FusedBackwardSupports(a) ||
                jaxdnn::attention::Sm90FusedBackwardOrdered(a) == unordered)) {
    std::printf("%-44s FAIL: Sm90FusedBackwardSupports() %d, Sm90FusedBackwardOrdered() %d\n", c.name.c_str(),
                jaxdnn::attention::Sm90FusedBackwardSupports(a),
                jaxdnn::attention::Sm90FusedBackwardOrdered(a));
    return false;
  }

  auto run_poisoned = [&](int variant, std::vector<uint16_t>& gq, std::vector<uint16_t>& gk,
                          std::vector<uint16_t>& gv) {
    CHECK_CUDA(cudaMemsetAsync(d.dq, 0xFF, nq * 2, stream));
    CHECK_CUDA(cudaMemsetAsync(d.dk, 0xFF, nkv * 2, stream));
    CHECK_CUDA(cudaMemsetAsync(d.dv, 0xFF, nkv * 2, stream));
    CHECK_CUDA(cudaMemsetAsync(d.ws, 0xFF, ws_elems * 4, stream));
    CHECK_CUDA(LaunchPath(a, stream, path, variant));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    gq.resize(nq);
    gk.resize(nkv);
    gv.resize(nkv);
    CHECK_CUDA(cudaMemcpy(gq.data(), d.dq, nq * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(gk.data(), d.dk, nkv * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(gv.data(), d.dv, nkv * 2, cudaMemcpyDeviceToHost));
  };
  std::vector<uint16_t> gq1, gk1, gv1, gq2, gk2, gv2;
  const int variant = fused ? c.variant : -1;
  run_poisoned(variant, gq1, gk1, gv1);
  run_poisoned(variant, gq2, gk2, gv2);
  // The unordered dQ may round differently per run; dK and dV may not.
  bool det = (unordered || gq1 == gq2) && gk1 == gk2 && gv1 == gv2;
  if (fused) {
    run_poisoned(variant, gq2, gk2, gv2);
    det = det && (unordered || gq1 == gq2) && gk1 == gk2 && gv1 == gv2;
  }
  bool ok = det;

  AttnMaskParams hm = m;
  hm.q_segments = hq_seg.empty() ? nullptr : hq_seg.data();
  hm.kv_segments = hkv_seg.empty() ? nullptr : hkv_seg.data();
  hm.q_lengths = hql.empty() ? nullptr : hql.data();
  hm.kv_lengths = hkvl.empty() ? nullptr : hkvl.data();
  const HostMask mask = CountPairs(hm, fa.shape);
  const size_t q_row = static_cast<size_t>(c.H) * c.D, kv_row = static_cast<size_t>(c.Hk) * c.D;

  GradErr eq, ek, ev;
  std::string notes;
  if (c.check) {
    float *rdq, *rdk, *rdv, *rdelta;
    CHECK_CUDA(cudaMalloc(&rdq, nq * 4));
    CHECK_CUDA(cudaMalloc(&rdk, nkv * 4));
    CHECK_CUDA(cudaMalloc(&rdv, nkv * 4));
    CHECK_CUDA(cudaMalloc(&rdelta, nl * 4));
    const int threads = 256;
    const int bq = static_cast<int>((static_cast<int64_t>(nl) * 32 + threads - 1) / threads);
    const int bk = static_cast<int>((static_cast<int64_t>(c.B) * c.Hk * c.Skv * 32 + threads - 1) / threads);
    auto launch_ref = [&](auto tag) {
      using T = decltype(tag);
      RefDqMasked<T><<<bq, threads, 0, stream>>>((const T*)d.q, (const T*)d.k, (const T*)d.v, (const T*)d.o,
                                                 (const T*)d.dout, d.lse, rdelta, rdq, fa.shape, m);
      RefDkDvMasked<T><<<bk, threads, 0, stream>>>((const T*)d.q, (const T*)d.k, (const T*)d.v,
                                                   (const T*)d.dout, d.lse, rdelta, rdk, rdv, fa.shape, m);
    };
    if (f16) {
      launch_ref(__half{});
    } else {
      launch_ref(__nv_bfloat16{});
    }
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaStreamSynchronize(stream));
    std::vector<float> hrq(nq), hrk(nkv), hrv(nkv);
    CHECK_CUDA(cudaMemcpy(hrq.data(), rdq, nq * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(hrk.data(), rdk, nkv * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(hrv.data(), rdv, nkv * 4, cudaMemcpyDeviceToHost));
    for (void* p : {rdq, rdk, rdv, rdelta}) CHECK_CUDA(cudaFree(p));
    eq = CompareMasked(gq1, hrq, f16, mask.row_live, q_row);
    ek = CompareMasked(gk1, hrk, f16, mask.key_live, kv_row);
    ev = CompareMasked(gv1, hrv, f16, mask.key_live, kv_row);
    ok = ok && GradOk(eq) && GradOk(ek) && GradOk(ev);
    // The other block orders / dQ block sizes (bits 1 and 8; the overlap bits
    // do not apply to the extended path) against the same reference.
    for (int var : {0, 1, 8, 9}) {
      if (fused) break;  // segments: the fused launcher ignores the variant bits
      std::vector<uint16_t> vq, vk, vv;
      run_poisoned(var, vq, vk, vv);
      const GradErr xq = CompareMasked(vq, hrq, f16, mask.row_live, q_row),
                    xk = CompareMasked(vk, hrk, f16, mask.key_live, kv_row),
                    xv = CompareMasked(vv, hrv, f16, mask.key_live, kv_row);
      if (!(GradOk(xq) && GradOk(xk) && GradOk(xv))) {
        char buf[256];
        std::snprintf(buf, sizeof(buf),
                      "\n    variant %d: relL2 dq %.3g dk %.3g dv %.3g, non-finite %lld/%lld/%lld, "
                      "unmasked %lld/%lld/%lld FAIL",
                      var, xq.rel_l2, xk.rel_l2, xv.rel_l2, xq.nonfinite, xk.nonfinite, xv.nonfinite,
                      xq.unmasked, xk.unmasked, xv.unmasked);
        notes += buf;
        ok = false;
      }
    }
    std::printf("%-44s %-4s %9.3g %9.3g %9.3g %9.3g %9.3g %9.3g %5s %s", label.c_str(), f16 ? "f16" : "bf16",
                eq.MaxRel(), eq.rel_l2, ek.MaxRel(), ek.rel_l2, ev.MaxRel(), ev.rel_l2, det ? "yes" : "NO",
                ok ? "ok" : "FAIL");
    const long long nf = eq.nonfinite + ek.nonfinite + ev.nonfinite,
                    um = eq.unmasked + ek.unmasked + ev.unmasked;
    if (nf + um > 0) {
      std::printf(" (non-finite dq %lld dk %lld dv %lld; unmasked dq %lld dk %lld dv %lld)", eq.nonfinite,
                  ek.nonfinite, ev.nonfinite, eq.unmasked, ek.unmasked, ev.unmasked);
    }
    std::printf("%s\n", notes.c_str());
  } else {
    long long nf = 0;
    for (const auto* g : {&gq1, &gk1, &gv1}) {
      for (uint16_t bits : *g) nf += !std::isfinite(HostToF(bits, f16));
    }
    ok = ok && nf == 0;
    const double pairs = mask.pairs;
    const double flops = 10.0 * c.H * c.D * pairs;  // 5 gemms of 2 flops per allowed pair and dim
    if (fused) {
      // Fused (this path) vs the two-kernel backward; TFLOP/s over the
      // 128x128 (query, key) blocks that hold an allowed pair (5 gemms of 2
      // flops per block element and dim), and over the allowed pairs.
      double blocks = 0;
      {
        const int nqb = (c.Sq + 127) / 128, nkb = (c.Skv + 127) / 128;
        std::vector<char> any(static_cast<size_t>(nqb) * nkb);
        for (int b = 0; b < c.B; ++b) {
          std::fill(any.begin(), any.end(), 0);
          for (int i = 0; i < c.Sq; ++i) {
            const KeyRange r = AllowedKeys(hm, fa.shape, b, i);
            for (int64_t j = r.lo; j < r.hi; ++j) {
              if (SameSegment(hm, fa.shape, b, i, j)) any[static_cast<size_t>(i / 128) * nkb + j / 128] = 1;
            }
          }
          for (char x : any) blocks += x;
        }
      }
      const double bflops = 10.0 * c.H * c.D * 128.0 * 128.0 * blocks;
      const double ms = TimeBackward(a, stream, path, variant);
      const double ms2 = TimeBackward(a, stream, BwdPath::kTwoKernel);
      std::printf(
          "%-44s %-4s %s det %s, finite %s: fused %.3f ms (%.0f TFLOP/s over %.0f live 128x128 blocks, "
          "%.0f over allowed pairs); two-kernel %.3f ms (%.0f, %.0f); fused x%.2f %s\n",
          (c.name + (c.variant >= 0 ? " v" + std::to_string(c.variant) : "")).c_str(), f16 ? "f16" : "bf16",
          unordered ? "unordered" : "ordered", det ? "yes" : "NO", nf == 0 ? "yes" : "NO", ms,
          bflops / (ms * 1e-3) / 1e12, blocks, flops / (ms * 1e-3) / 1e12, ms2, bflops / (ms2 * 1e-3) / 1e12,
          flops / (ms2 * 1e-3) / 1e12, ms2 / ms, ok ? "ok" : "FAIL");
      std::fflush(stdout);
      return ok;
    }
    const double ms = TimeBackward(a, stream);
    // The dense causal backward of the same shape, for comparison.
    AttnBwdArgs dense = a;
    dense.mask_params = AttnMaskParams{};
    dense.mask_params.scale = m.scale;
    dense.mask_params.causal = c.Sq == c.Skv;
    const double ms_dense = TimeBackward(dense, stream);
    std::printf(
        "%-44s %-4s det %s, finite %s: %.3f ms (%.0f TFLOP/s over allowed pairs, %.1f%% of the causal "
        "pairs); dense causal %.3f ms (x%.2f) %s\n",
        c.name.c_str(), f16 ? "f16" : "bf16", det ? "yes" : "NO", nf == 0 ? "yes" : "NO", ms,
        flops / (ms * 1e-3) / 1e12, 100.0 * pairs / (0.5 * c.B * double(c.Sq) * (c.Sq + 1)), ms_dense,
        ms_dense / ms, ok ? "ok" : "FAIL");
  }
  std::fflush(stdout);
  return ok;
}

inline std::vector<ExtCase> ExtCases() {
  std::vector<ExtCase> v;
  auto add = [&](ExtCase c) { v.push_back(std::move(c)); };
  // name, B, Sq, Skv, H, Hk, D, causal, f16
  // Padding lengths (a batch row with q_length 0, one with kv_length 1).
  {
    ExtCase c{"lengths 3x1000 d128", 3, 1000, 1000, 4, 2, 128, false, false};
    c.q_lengths = {1000, 0, 517};
    c.kv_lengths = {1000, 700, 1};
    add(c);
    ExtCase c2{"lengths causal 3x1000 d64", 3, 1000, 1000, 2, 2, 64, true, true};
    c2.q_lengths = {999, 0, 130};
    c2.kv_lengths = {1000, 64, 129};
    add(c2);
  }
  // Causal bottom-right (q_len < kv_len), plain and with lengths.
  add({"causal br 300x1000 d128", 2, 300, 1000, 2, 1, 128, true, false});
  add({"causal br 300x1000 d64", 1, 300, 1000, 2, 2, 64, true, true});
  {
    ExtCase c{"causal br lengths 300x1000 d128", 2, 300, 1000, 2, 2, 128, true, true};
    c.q_lengths = {300, 123};
    c.kv_lengths = {1000, 777};
    add(c);
  }
  add({"causal br 7x1537 d64", 2, 7, 1537, 2, 1, 64, true, false});
  // Windows: both sides bounded, left only (sliding causal), right only.
  {
    ExtCase c{"window (100,50) 1537 d64", 2, 1537, 1537, 2, 2, 64, false, false};
    c.window_left = 100;
    c.window_right = 50;
    add(c);
    ExtCase c2{"window (256,-1) causal 1537 d128", 1, 1537, 1537, 4, 2, 128, true, true};
    c2.window_left = 256;
    add(c2);
    ExtCase c3{"window (-1,37) 1000 d128", 1, 1000, 1000, 2, 2, 128, false, false};
    c3.window_right = 37;
    add(c3);
    ExtCase c4{"window (0,0) 300x1000 d64", 1, 300, 1000, 2, 2, 64, false, true};
    c4.window_left = 0;
    c4.window_right = 0;
    add(c4);
  }
  // Packed documents (segment ids; a document of length 1; lengths not
  // multiples of 64/128), GQA ratio 4.
  {
    const std::vector<int> docs = {1, 130, 64, 257, 7, 191, 128, 65, 300};
    ExtCase c{"segments causal gqa4 1000 d128", 2, 1000, 1000, 8, 2, 128, true, false};
    c.docs = docs;
    add(c);
    ExtCase c2{"segments gqa4 1537 d64", 1, 1537, 1537, 4, 1, 64, false, true};
    c2.docs = docs;
    add(c2);
    ExtCase c3{"segments+lengths causal 1000 d64", 2, 1000, 1000, 2, 2, 64, true, false};
    c3.docs = {1, 333, 70, 596};
    c3.q_lengths = {1000, 401};
    c3.kv_lengths = {1000, 401};
    add(c3);
  }
  // Softcap 30 (scale 4 so that tanh bends), alone and with segments + window.
  {
    ExtCase c{"softcap30 causal 1000 d128", 2, 1000, 1000, 2, 1, 128, true, false};
    c.softcap = 30.f;
    c.scale = 4.f;
    add(c);
    ExtCase c2{"softcap30 seg+window 1000 d64", 1, 1000, 1000, 4, 4, 64, false, true};
    c2.softcap = 30.f;
    c2.scale = 4.f;
    c2.docs = {1, 250, 129, 620};
    c2.window_left = 200;
    c2.window_right = 10;
    add(c2);
    ExtCase c3{"softcap30 dense shape 384 d128", 1, 384, 384, 2, 2, 128, false, true};
    c3.softcap = 30.f;
    add(c3);
  }
  // Odd lengths.
  {
    ExtCase c{"lengths 1x1 d128", 2, 1, 1, 2, 2, 128, false, false};
    c.q_lengths = {1, 0};
    c.kv_lengths = {1, 1};
    add(c);
    ExtCase c2{"lengths causal 7x7 d64", 2, 7, 7, 2, 1, 64, true, true};
    c2.q_lengths = {7, 3};
    c2.kv_lengths = {7, 5};
    add(c2);
    ExtCase c3{"lengths causal 1537 d128", 2, 1537, 1537, 2, 2, 128, true, false};
    c3.q_lengths = {1537, 1000};
    c3.kv_lengths = {1537, 1536};
    add(c3);
  }
  return v;
}

// The timing case: packed documents of ~1024 tokens (batch 2, seq 8192,
// 16 heads, d128, causal).
inline ExtCase PackedTimingCase() {
  ExtCase c{"TIMING packed docs 2x8192 h16 d128 causal", 2, 8192, 8192, 16, 16, 128, true, false};
  c.docs = {1000, 1048, 1024, 999, 1049, 1024, 1021, 1027};
  c.check = false;
  return c;
}

// Head dim 256 (the d256 mode of sm90_attention_bwd_selftest; needs
// JAXDNN_ATTENTION_SM90_BWD_D256=1, which that mode sets): each masked feature
// once, bf16 and f16, GQA 4.
inline std::vector<ExtCase> ExtCasesD256() {
  std::vector<ExtCase> v;
  {
    ExtCase c{"lengths 3x1000 d256", 3, 1000, 1000, 4, 1, 256, false, false};
    c.q_lengths = {1000, 0, 517};
    c.kv_lengths = {1000, 700, 1};
    v.push_back(c);
  }
  v.push_back({"causal br 300x1000 d256", 2, 300, 1000, 2, 1, 256, true, true});
  v.push_back({"causal br 7x1537 d256", 1, 7, 1537, 2, 2, 256, true, false});
  {
    ExtCase c{"window (100,50) 1537 d256", 1, 1537, 1537, 2, 2, 256, false, true};
    c.window_left = 100;
    c.window_right = 50;
    v.push_back(c);
    ExtCase c2{"window (256,-1) causal 1000 d256", 1, 1000, 1000, 4, 1, 256, true, false};
    c2.window_left = 256;
    v.push_back(c2);
  }
  {
    ExtCase c{"segments causal gqa4 1000 d256", 2, 1000, 1000, 8, 2, 256, true, false};
    c.docs = {1, 130, 64, 257, 7, 191, 128, 65, 300};
    v.push_back(c);
    ExtCase c2{"segments 1537 d256", 1, 1537, 1537, 2, 2, 256, false, true};
    c2.docs = {1, 333, 70, 596};
    v.push_back(c2);
  }
  {
    ExtCase c{"softcap30 causal 1000 d256", 2, 1000, 1000, 2, 1, 256, true, false};
    c.softcap = 30.f;
    c.scale = 4.f;
    v.push_back(c);
    ExtCase c2{"softcap30 seg+window 1000 d256", 1, 1000, 1000, 4, 4, 256, false, true};
    c2.softcap = 30.f;
    c2.scale = 4.f;
    c2.docs = {1, 250, 129, 620};
    c2.window_left = 200;
    c2.window_right = 10;
    v.push_back(c2);
  }
  {
    ExtCase c{"lengths 1x1 d256", 2, 1, 1, 2, 2, 256, false, true};
    c.q_lengths = {1, 0};
    c.kv_lengths = {1, 1};
    v.push_back(c);
    ExtCase c2{"lengths causal 7x7 d256", 2, 7, 7, 2, 1, 256, true, false};
    c2.q_lengths = {7, 3};
    c2.kv_lengths = {7, 5};
    v.push_back(c2);
  }
  return v;
}

inline bool RunExtD256Cases(cudaStream_t stream) {
  std::printf("%-44s %-4s %9s %9s %9s %9s %9s %9s %5s\n", "ext case", "dt", "dq_maxrel", "dq_relL2",
              "dk_maxrel", "dk_relL2", "dv_maxrel", "dv_relL2", "det");
  bool all_ok = true;
  for (const ExtCase& c : ExtCasesD256()) all_ok = RunExtCase(c, stream) && all_ok;
  return all_ok;
}

// The seg mode (and the segment part of fusedcheck / atomiccheck): packed
// documents through the fused backward's segment path against the masked
// reference. Document lengths from a seeded RNG: half of them shorter than
// 64, the others up to 700 (several 64- and 128-blocks); sequence lengths 1,
// 7, 1000, 1537, 2048; causal and not; GQA (4 heads, 2 kv heads); head dims
// 64 and 128; bf16 and f16; plus recurring (non-contiguous) ids and a single
// document.
inline std::vector<int> RandomDocs(uint32_t seed, int count) {
  std::vector<int> docs;
  uint32_t x = seed;
  for (int i = 0; i < count; ++i) {
    x = x * 1664525u + 1013904223u;
    const uint32_t r = x >> 8;
    docs.push_back((r & 1) ? 1 + static_cast<int>((r >> 1) % 63) : 64 + static_cast<int>((r >> 1) % 637));
  }
  return docs;
}

inline std::vector<ExtCase> SegCases() {
  std::vector<ExtCase> v;
  auto add = [&](ExtCase c, uint32_t seed) {
    c.docs = RandomDocs(seed, 64);
    v.push_back(c);
  };
  // name, B, Sq, Skv, H, Hk, D, causal, f16
  add({"seg causal 1 d128", 1, 1, 1, 4, 2, 128, true, false}, 1);
  add({"seg 1 d64", 1, 1, 1, 4, 2, 64, false, true}, 2);
  add({"seg 7 d64", 2, 7, 7, 4, 2, 64, false, true}, 3);
  add({"seg causal 7 d128", 2, 7, 7, 4, 2, 128, true, false}, 4);
  add({"seg causal 1000 d128", 2, 1000, 1000, 4, 2, 128, true, false}, 5);
  add({"seg causal 1000 d64", 2, 1000, 1000, 4, 2, 64, true, true}, 6);
  add({"seg 1000 d128", 1, 1000, 1000, 4, 2, 128, false, true}, 7);
  add({"seg 1537 d128", 1, 1537, 1537, 4, 2, 128, false, true}, 8);
  add({"seg 1537 d64", 2, 1537, 1537, 4, 2, 64, false, false}, 9);
  add({"seg causal 1537 d64", 1, 1537, 1537, 4, 2, 64, true, false}, 10);
  add({"seg causal 2048 d128", 1, 2048, 2048, 4, 2, 128, true, true}, 11);
  add({"seg causal 2048 d64", 1, 2048, 2048, 4, 2, 64, true, false}, 12);
  add({"seg 2048 d128", 1, 2048, 2048, 4, 2, 128, false, false}, 13);
  {
    ExtCase c{"seg recurring ids causal 1000 d128", 1, 1000, 1000, 4, 2, 128, true, false};
    c.docs = {1};
    c.scattered_ids = true;
    v.push_back(c);
    ExtCase c2{"seg recurring ids 1537 d64", 1, 1537, 1537, 4, 2, 64, false, true};
    c2.docs = {1};
    c2.scattered_ids = true;
    v.push_back(c2);
  }
  {
    ExtCase c{"seg one document causal 1000 d128", 1, 1000, 1000, 4, 2, 128, true, true};
    c.docs = {1000};
    v.push_back(c);
  }
  return v;
}

// The 80-query segment steps (variant 404 = 256 | 128 | 16 | 4: head dim 128,
// unordered only; causal from each key block's diagonal 128n + 80i, else at
// multiples of 80), forced by the variant whatever
// JAXDNN_ATTENTION_SM90_BWD_Q80_SEG says. Lengths 1, 7 (one partial step),
// 79, 81 (one step less a row / a one-row tail), 161 (a second key block
// from inside step 1), 1000, 1537 (every diagonal offset 128n mod 80); the
// seeded random documents of SegCases, and documents cut at and around
// 16- and 80-row edges (the pre-pass's 80-row ranges every 16 rows); GQA;
// bf16 and f16; plus recurring ids and a single document.
inline std::vector<ExtCase> SegQ80Cases() {
  std::vector<ExtCase> v;
  auto add = [&](ExtCase c, uint32_t seed) {
    c.docs = RandomDocs(seed, 64);
    c.variant = 404;
    v.push_back(c);
  };
  // name, B, Sq, Skv, H, Hk, D, causal, f16
  add({"seg q80 causal 1 d128", 1, 1, 1, 4, 2, 128, true, false}, 21);
  add({"seg q80 1 d128", 1, 1, 1, 2, 1, 128, false, true}, 22);
  add({"seg q80 causal 7 d128", 2, 7, 7, 4, 2, 128, true, true}, 23);
  add({"seg q80 7 d128", 2, 7, 7, 4, 1, 128, false, false}, 24);
  add({"seg q80 causal 79 d128", 2, 79, 79, 4, 2, 128, true, false}, 25);
  add({"seg q80 79 d128", 1, 79, 79, 2, 2, 128, false, true}, 26);
  add({"seg q80 causal 81 d128", 2, 81, 81, 4, 2, 128, true, true}, 27);
  add({"seg q80 81 d128", 2, 81, 81, 4, 2, 128, false, false}, 28);
  add({"seg q80 causal 161 d128", 1, 161, 161, 4, 1, 128, true, false}, 29);
  add({"seg q80 causal 1000 d128", 2, 1000, 1000, 4, 2, 128, true, false}, 30);
  add({"seg q80 causal 1000 d128", 2, 1000, 1000, 4, 1, 128, true, true}, 31);
  add({"seg q80 1000 d128", 1, 1000, 1000, 4, 2, 128, false, true}, 32);
  add({"seg q80 causal 1537 d128", 1, 1537, 1537, 4, 2, 128, true, true}, 33);
  add({"seg q80 causal 1537 d128", 2, 1537, 1537, 2, 2, 128, true, false}, 34);
  add({"seg q80 1537 d128", 2, 1537, 1537, 4, 2, 128, false, false}, 35);
  add({"seg q80 causal 2048 d128", 1, 2048, 2048, 4, 2, 128, true, false}, 36);
  {
    // Documents ending at, one before and one after 16- and 80-row edges.
    const std::vector<int> edges = {16, 80, 15, 81, 17, 79, 48, 1, 160, 47, 65, 200, 33, 96, 127, 129};
    for (int causal = 0; causal < 2; ++causal) {
      for (int f16 = 0; f16 < 2; ++f16) {
        ExtCase c{std::string("seg q80 edges ") + (causal ? "causal " : "") + "1537 d128",
                  1 + f16,
                  1537,
                  1537,
                  4,
                  2,
                  128,
                  causal != 0,
                  f16 != 0};
        c.docs = edges;
        c.variant = 404;
        v.push_back(c);
      }
    }
  }
  {
    ExtCase c{"seg q80 recurring ids causal 1000 d128", 1, 1000, 1000, 4, 2, 128, true, false};
    c.docs = {1};
    c.scattered_ids = true;
    c.variant = 404;
    v.push_back(c);
    ExtCase c2{"seg q80 recurring ids 1537 d128", 1, 1537, 1537, 4, 2, 128, false, true};
    c2.docs = {1};
    c2.scattered_ids = true;
    c2.variant = 404;
    v.push_back(c2);
    ExtCase c3{"seg q80 one document causal 1000 d128", 1, 1000, 1000, 4, 2, 128, true, true};
    c3.docs = {1000};
    c3.variant = 404;
    v.push_back(c3);
  }
  return v;
}

// The seg timing case: batch 2, seq 8192, 16 heads, d128, causal, document
// lengths exponential with mean 1024 (seeded), fused vs two-kernel.
inline ExtCase SegTimingCase() {
  ExtCase c{"TIMING seg exp(1024) docs 2x8192 h16 d128 causal", 2, 8192, 8192, 16, 16, 128, true, false};
  uint32_t x = 2026u;
  for (int total = 0; total < 2 * 8192 + 8192;) {
    x = x * 1664525u + 1013904223u;
    const double u = (static_cast<double>(x >> 8) + 0.5) / 16777216.0;  // (0, 1)
    const int n = std::max(1, static_cast<int>(std::lround(-1024.0 * std::log(u))));
    c.docs.push_back(n);
    total += n;
  }
  c.check = false;
  return c;
}

// ordered / unordered: which dQ modes to check; timing: the timing case too.
// Unordered: also SegQ80Cases (variant 404), and the timing case with it.
// (The ordered mode ignores bit 128: 404 would run the 64-query steps.)
inline bool RunSegCases(cudaStream_t stream, bool ordered, bool unordered, bool timing) {
  std::printf("%-44s %-4s %9s %9s %9s %9s %9s %9s %5s\n", "seg case (fused backward)", "dt", "dq_maxrel",
              "dq_relL2", "dk_maxrel", "dk_relL2", "dv_maxrel", "dv_relL2", "det");
  bool all_ok = true;
  for (const ExtCase& c : SegCases()) {
    if (ordered) all_ok = RunExtCase(c, stream, BwdPath::kFusedOrdered) && all_ok;
    if (unordered) all_ok = RunExtCase(c, stream, BwdPath::kFusedUnordered) && all_ok;
  }
  if (unordered) {
    for (const ExtCase& c : SegQ80Cases()) all_ok = RunExtCase(c, stream, BwdPath::kFusedUnordered) && all_ok;
  }
  if (timing) {
    const ExtCase t = SegTimingCase();
    if (ordered) all_ok = RunExtCase(t, stream, BwdPath::kFusedOrdered) && all_ok;
    if (unordered) {
      all_ok = RunExtCase(t, stream, BwdPath::kFusedUnordered) && all_ok;
      ExtCase t80 = t;
      t80.variant = 404;
      all_ok = RunExtCase(t80, stream, BwdPath::kFusedUnordered) && all_ok;
    }
  }
  return all_ok;
}

inline int RunExtMode() {
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  std::printf("%-44s %-4s %9s %9s %9s %9s %9s %9s %5s\n", "ext case", "dt", "dq_maxrel", "dq_relL2",
              "dk_maxrel", "dk_relL2", "dv_maxrel", "dv_relL2", "det");
  bool all_ok = true;
  for (const ExtCase& c : ExtCases()) all_ok = RunExtCase(c, stream) && all_ok;
  all_ok = RunExtCase(PackedTimingCase(), stream) && all_ok;
  CHECK_CUDA(cudaStreamDestroy(stream));
  std::printf("%s\n", all_ok ? "ALL PASSED" : "SOME FAILED");
  return all_ok ? 0 : 1;
}

}  // namespace sm90_bwd_ext
