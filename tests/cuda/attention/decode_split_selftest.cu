// Standalone self-test of the split-KV decode forward (cpp/attention/sm80/decode_split.cu):
// short queries (1, 4, 16) over long key/value caches, MHA/GQA/MQA, head dims
// 64/128/256, bf16 and f16, padding lengths, bottom-right causal, windows,
// softcap, fully-masked rows. The fp32 reference (one warp per query row)
// follows attention/mask.h (AllowedKeys, Logit), the rules every kernel
// follows. Each case runs with the default plan, one split and many splits;
// outputs are poisoned (0xFF: NaN) before each launch; rows with no allowed
// key must come back as exact zeros with lse = -inf. Then determinism (two
// runs bytewise equal) and timings (median of 20 after 5 warm-ups) in TB/s
// over the key/value bytes, next to the Hopper forward on the same problem.
//
// Usage: decode_split_selftest [check|time|all]   (default all). Exit 1 on failure.
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
#include "attention/sm80/decode_split.h"
#include "attention/sm90/forward.h"
#include "selftest_reference_forward.cuh"
#include "../common/selftest_util.cuh"

namespace ja = jaxdnn::attention;
using ja::AttnFwdArgs;
using namespace sm90_selftest;

namespace {

struct Case {
  const char* name;
  int B, Sq, Skv, H, Hk, D;
  bool f16, causal;
  int wl, wr;                   // -1: unbounded
  float softcap;                // 0: none
  std::vector<int> q_lengths;   // empty: none
  std::vector<int> kv_lengths;  // empty: none
};

struct Buffers {
  void *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr;
  float *lse = nullptr, *rout = nullptr, *rlse = nullptr, *ws = nullptr;
  int32_t *qlen = nullptr, *kvlen = nullptr;
  size_t ws_elems = 0;
};

void FillRandom(void* dst, size_t n, bool f16) {
  const std::vector<uint16_t> bits = RandomBits(n, f16);
  CHECK_CUDA(cudaMemcpy(dst, bits.data(), n * 2, cudaMemcpyHostToDevice));
}

AttnFwdArgs ArgsFor(const Case& c, Buffers& buf) {
  AttnFwdArgs a{};
  a.shape.batch = c.B;
  a.shape.q_len = c.Sq;
  a.shape.kv_len = c.Skv;
  a.shape.heads = c.H;
  a.shape.kv_heads = c.Hk;
  a.shape.head_dim = c.D;
  a.dtype = c.f16 ? jaxdnn::ffi::DataType::F16 : jaxdnn::ffi::DataType::BF16;
  a.q = buf.q;
  a.k = buf.k;
  a.v = buf.v;
  a.out = buf.out;
  a.lse = buf.lse;
  ja::AttnMaskParams& m = a.mask_params;
  m.scale = 1.f / std::sqrt(static_cast<float>(c.D));
  m.causal = c.causal;
  m.window_left = c.wl;
  m.window_right = c.wr;
  m.softcap = c.softcap;
  if (!c.q_lengths.empty()) {
    CHECK_CUDA(cudaMemcpy(buf.qlen, c.q_lengths.data(), c.B * 4, cudaMemcpyHostToDevice));
    m.q_lengths = buf.qlen;
  }
  if (!c.kv_lengths.empty()) {
    CHECK_CUDA(cudaMemcpy(buf.kvlen, c.kv_lengths.data(), c.B * 4, cudaMemcpyHostToDevice));
    m.kv_lengths = buf.kvlen;
  }
  a.workspace = buf.ws;
  a.workspace_elems = int64_t(buf.ws_elems);
  return a;
}

// Checks one launch against the reference; prints a line, returns pass/fail.
bool CheckOne(const Case& c, const AttnFwdArgs& a, const ja::DecodeSplitPlan& plan, const char* label,
              const std::vector<float>& hro, const std::vector<float>& hrl, cudaStream_t stream) {
  const size_t nq = size_t(c.B) * c.Sq * c.H * c.D, nl = size_t(c.B) * c.H * c.Sq;
  CHECK_CUDA(cudaMemsetAsync(a.out, 0xFF, nq * 2, stream));
  CHECK_CUDA(cudaMemsetAsync(a.lse, 0xFF, nl * 4, stream));
  CHECK_CUDA(cudaMemsetAsync(a.workspace, 0xFF, ja::DecodeWorkspaceElemsForPlan(a.shape, plan) * 4, stream));
  CHECK_CUDA(ja::LaunchAttentionFwdDecodeSplit(a, plan, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<uint16_t> gout(nq);
  std::vector<float> glse(nl);
  CHECK_CUDA(cudaMemcpy(gout.data(), a.out, nq * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(glse.data(), a.lse, nl * 4, cudaMemcpyDeviceToHost));
  double out_max = 0, out_l2 = 0, out_ref = 0, lse_max = 0, lse_l2 = 0, lse_ref = 0;
  long long nonfinite = 0, bad_inf = 0, empty_rows = 0, nonzero_empty = 0;
  for (size_t i = 0; i < nq; ++i) {
    const float g = HostToF(gout[i], c.f16);
    if (!std::isfinite(g)) {
      ++nonfinite;
      continue;
    }
    const double d = double(g) - hro[i];
    out_max = std::max(out_max, std::fabs(d));
    out_l2 += d * d;
    out_ref += double(hro[i]) * hro[i];
  }
  for (size_t i = 0; i < nl; ++i) {
    const bool ref_empty = std::isinf(hrl[i]) && hrl[i] < 0;
    const bool got_empty = std::isinf(glse[i]) && glse[i] < 0;
    if (std::isnan(glse[i])) {
      ++nonfinite;
      continue;
    }
    if (ref_empty != got_empty) {
      ++bad_inf;
      continue;
    }
    if (ref_empty) {
      ++empty_rows;  // its output row must be exact zeros: lse row i = (b, h, qi)
      const size_t qi = i % c.Sq, h = (i / c.Sq) % c.H, b = i / (size_t(c.Sq) * c.H);
      for (int d = 0; d < c.D; ++d) nonzero_empty += gout[((b * c.Sq + qi) * c.H + h) * c.D + d] != 0;
      continue;
    }
    const double d = double(glse[i]) - hrl[i];
    lse_max = std::max(lse_max, std::fabs(d));
    lse_l2 += d * d;
    lse_ref += double(hrl[i]) * hrl[i];
  }
  out_l2 = std::sqrt(out_l2 / std::max(out_ref, 1e-30));
  lse_l2 = std::sqrt(lse_l2 / std::max(lse_ref, 1e-30));
  const bool ok = nonfinite == 0 && bad_inf == 0 && nonzero_empty == 0 && out_l2 <= 1e-2 && out_max <= 5e-2 &&
                  lse_l2 <= 1e-3 && lse_max <= 5e-2;
  std::printf(
      "%-34s %-5s %s splits %5lld slots %5lld  out max %8.3g relL2 %8.3g  lse max %8.3g relL2 %8.3g"
      "  empty %lld (nonzero %lld, bad -inf %lld) %s%s\n",
      c.name, c.f16 ? "f16" : "bf16", label, (long long)plan.splits, (long long)plan.slots(), out_max, out_l2,
      lse_max, lse_l2, empty_rows, nonzero_empty, bad_inf, ok ? "PASS" : "FAIL",
      nonfinite ? " (non-finite outputs)" : "");
  std::fflush(stdout);
  return ok;
}

bool RunCase(const Case& c, Buffers& buf, cudaStream_t stream) {
  const size_t nq = size_t(c.B) * c.Sq * c.H * c.D, nkv = size_t(c.B) * c.Skv * c.Hk * c.D;
  const size_t nl = size_t(c.B) * c.H * c.Sq;
  FillRandom(buf.q, nq, c.f16);
  FillRandom(buf.k, nkv, c.f16);
  FillRandom(buf.v, nkv, c.f16);
  const AttnFwdArgs a = ArgsFor(c, buf);
  if (!ja::DecodeSplitKernelTakes(a)) {
    std::printf("%-34s FAIL: DecodeSplitKernelTakes() is false\n", c.name);
    return false;
  }
  {
    const int threads = 256;
    const unsigned blocks = unsigned((nl * 32 + threads - 1) / threads);
    if (c.f16) {
      ReferenceFwd<__half><<<blocks, threads, 0, stream>>>(
          static_cast<const __half*>(buf.q), static_cast<const __half*>(buf.k),
          static_cast<const __half*>(buf.v), buf.rout, buf.rlse, a.shape, a.mask_params);
    } else {
      ReferenceFwd<__nv_bfloat16><<<blocks, threads, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(buf.q), static_cast<const __nv_bfloat16*>(buf.k),
          static_cast<const __nv_bfloat16*>(buf.v), buf.rout, buf.rlse, a.shape, a.mask_params);
    }
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  std::vector<float> hro(nq), hrl(nl);
  CHECK_CUDA(cudaMemcpy(hro.data(), buf.rout, nq * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hrl.data(), buf.rlse, nl * 4, cudaMemcpyDeviceToHost));

  bool ok = true;
  const ja::DecodeSplitPlan plan = ja::MakeDecodeSplitPlan(a.shape);
  ok &= CheckOne(c, a, plan, "plan ", hro, hrl, stream);
  ok &= CheckOne(c, a, ja::DecodeSplitPlanWithSplits(a.shape, 1), "one  ", hro, hrl, stream);
  ok &= CheckOne(c, a, ja::DecodeSplitPlanWithSplits(a.shape, 64), "many ", hro, hrl, stream);

  // Determinism: two runs of the default plan, bytewise equal.
  std::vector<uint16_t> o1(nq), o2(nq);
  std::vector<float> l1(nl), l2(nl);
  CHECK_CUDA(ja::LaunchAttentionFwdDecodeSplit(a, plan, stream));
  CHECK_CUDA(cudaMemcpyAsync(o1.data(), a.out, nq * 2, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaMemcpyAsync(l1.data(), a.lse, nl * 4, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaMemsetAsync(a.out, 0xFF, nq * 2, stream));
  CHECK_CUDA(ja::LaunchAttentionFwdDecodeSplit(a, plan, stream));
  CHECK_CUDA(cudaMemcpyAsync(o2.data(), a.out, nq * 2, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaMemcpyAsync(l2.data(), a.lse, nl * 4, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const bool same =
      std::memcmp(o1.data(), o2.data(), nq * 2) == 0 && std::memcmp(l1.data(), l2.data(), nl * 4) == 0;
  if (!same) std::printf("%-34s FAIL: two runs differ\n", c.name);
  return ok && same;
}

template <typename F>
float MedianMs(F launch, cudaStream_t stream) {
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 5; ++i) CHECK_CUDA(launch());
  std::vector<float> ms(20);
  for (float& t : ms) {
    CHECK_CUDA(cudaEventRecord(e0, stream));
    CHECK_CUDA(launch());
    CHECK_CUDA(cudaEventRecord(e1, stream));
    CHECK_CUDA(cudaEventSynchronize(e1));
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
  }
  std::sort(ms.begin(), ms.end());
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  return ms[10];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  CHECK_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs), mode %s\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, mode.c_str());
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));

  const float kNo = 0.f;
  const std::vector<Case> cases = {
      // name                          B  Sq    Skv   H  Hk   D  f16   causal  wl   wr  cap  qlen  kvlen
      {"mha q1 kv16384", 1, 1, 16384, 16, 16, 128, false, false, -1, -1, kNo, {}, {}},
      {"mha q1 kv16384 f16", 1, 1, 16384, 16, 16, 128, true, false, -1, -1, kNo, {}, {}},
      {"kv len 1", 16, 1, 1, 16, 16, 128, false, false, -1, -1, kNo, {}, {}},
      {"kv len 7 q16 mqa causal(TL)", 2, 16, 7, 16, 1, 64, true, true, -1, -1, kNo, {}, {}},
      {"kv len 7 q4 d256", 1, 4, 7, 16, 16, 256, true, false, -1, -1, kNo, {}, {}},
      {"gqa4 q4 kv1000 causal", 2, 4, 1000, 16, 4, 64, false, true, -1, -1, kNo, {}, {}},
      {"gqa4 q16 kv1000 causal d256", 16, 16, 1000, 16, 4, 256, false, true, -1, -1, kNo, {}, {}},
      {"gqa4 q4 kv16384 lens causal",
       16,
       4,
       16384,
       16,
       4,
       128,
       true,
       true,
       -1,
       -1,
       kNo,
       {},
       {16384, 1, 0, 5000, 16383, 3, 777, 16000, 64, 65, 8191, 8192, 4, 100, 12345, 2}},
      {"mqa q16 kv65536 causal cap", 1, 16, 65536, 16, 1, 256, false, true, -1, -1, 30.f, {}, {}},
      {"mha q16 kv16384 window", 2, 16, 16384, 16, 16, 256, true, true, 127, 0, kNo, {}, {}},
      {"mqa q4 kv65536 lens window",
       2,
       4,
       65536,
       16,
       1,
       128,
       false,
       false,
       1000,
       -1,
       kNo,
       {3, 4},
       {65536, 40000}},
      {"gqa4 q1 kv65536 softcap", 1, 1, 65536, 16, 4, 64, false, false, -1, -1, 30.f, {}, {}},
      {"mha q4 kv1000 empty rows", 2, 4, 1000, 16, 16, 128, false, true, -1, -1, kNo, {2, 0}, {0, 999}},
      {"mqa q1 kv16384 qlens f16", 2, 1, 16384, 16, 1, 64, true, false, -1, -1, kNo, {1, 0}, {}},
      {"mha q16 kv16384 window q>w", 1, 16, 16384, 16, 16, 64, false, true, 5, 0, kNo, {}, {}},
      {"gqa4 q16 kv65536 d128 bf16", 1, 16, 65536, 16, 4, 128, false, true, -1, -1, kNo, {}, {}},
  };

  bool all_ok = true;
  if (mode == "check" || mode == "all") {
    size_t max_q = 0, max_kv = 0, max_ws = 0;
    for (const Case& c : cases) {
      max_q = std::max(max_q, size_t(c.B) * c.Sq * c.H * c.D);
      max_kv = std::max(max_kv, size_t(c.B) * c.Skv * c.Hk * c.D);
      ja::AttnShape s{c.B, c.Sq, c.Skv, c.H, c.Hk, c.D};
      for (int64_t splits : {int64_t(0), int64_t(1), int64_t(64)}) {
        const ja::DecodeSplitPlan plan =
            splits ? ja::DecodeSplitPlanWithSplits(s, splits) : ja::MakeDecodeSplitPlan(s);
        max_ws = std::max(max_ws, size_t(ja::DecodeWorkspaceElemsForPlan(s, plan)));
      }
    }
    Buffers buf;
    CHECK_CUDA(cudaMalloc(&buf.q, max_q * 2));
    CHECK_CUDA(cudaMalloc(&buf.out, max_q * 2));
    CHECK_CUDA(cudaMalloc(&buf.rout, max_q * 4));
    CHECK_CUDA(cudaMalloc(&buf.k, max_kv * 2));
    CHECK_CUDA(cudaMalloc(&buf.v, max_kv * 2));
    CHECK_CUDA(cudaMalloc(&buf.lse, max_q / 64 * 4 + 64));
    CHECK_CUDA(cudaMalloc(&buf.rlse, max_q / 64 * 4 + 64));
    CHECK_CUDA(cudaMalloc(&buf.ws, max_ws * 4));
    CHECK_CUDA(cudaMalloc(&buf.qlen, 64 * 4));
    CHECK_CUDA(cudaMalloc(&buf.kvlen, 64 * 4));
    buf.ws_elems = max_ws;
    for (const Case& c : cases) all_ok &= RunCase(c, buf, stream);
    for (void* p : {buf.q, buf.out, buf.k, buf.v, static_cast<void*>(buf.rout), static_cast<void*>(buf.lse),
                    static_cast<void*>(buf.rlse), static_cast<void*>(buf.ws), static_cast<void*>(buf.qlen),
                    static_cast<void*>(buf.kvlen)}) {
      CHECK_CUDA(cudaFree(p));
    }
  }

  if (mode == "time" || mode == "sweep" || mode == "all") {
    // bf16, 16 heads, d128, one query token, not causal: TB/s over the K/V bytes.
    for (int B : {1, 16}) {
      for (int Skv : {16384, 131072}) {
        const Case c{"time", B, 1, Skv, 16, 16, 128, false, false, -1, -1, kNo, {}, {}};
        Buffers buf;
        const size_t nq = size_t(B) * 16 * 128, nkv = size_t(B) * Skv * 16 * 128;
        ja::AttnShape s{B, 1, Skv, 16, 16, 128};
        buf.ws_elems = size_t(ja::DecodeWorkspaceElemsForPlan(s, ja::MakeDecodeSplitPlan(s)));
        CHECK_CUDA(cudaMalloc(&buf.q, nq * 2));
        CHECK_CUDA(cudaMalloc(&buf.out, nq * 2));
        CHECK_CUDA(cudaMalloc(&buf.lse, size_t(B) * 16 * 4));
        CHECK_CUDA(cudaMalloc(&buf.k, nkv * 2));
        CHECK_CUDA(cudaMalloc(&buf.v, nkv * 2));
        CHECK_CUDA(cudaMalloc(&buf.ws, buf.ws_elems * 4));
        // Up to 8.6 GB per operand: a constant fill (bf16 0x3C3C = 0.0115) on the device.
        CHECK_CUDA(cudaMemset(buf.q, 0x3C, nq * 2));
        CHECK_CUDA(cudaMemset(buf.k, 0x3C, nkv * 2));
        CHECK_CUDA(cudaMemset(buf.v, 0x3C, nkv * 2));
        const AttnFwdArgs a = ArgsFor(c, buf);
        // The forward's plan: MakeDecodeSplitPlan fitted to this GPU's waves.
        ja::DecodeSplitPlan plan;
        CHECK_CUDA(ja::FitDecodeSplitPlanToWaves(a, ja::MakeDecodeSplitPlan(s), &plan));
        const double bytes = 2.0 * nkv * 2;
        const float ms = MedianMs([&] { return ja::LaunchAttentionFwdDecodeSplit(a, plan, stream); }, stream);
        std::printf(
            "timing B=%-2d H=16 kv=%-6d d128 bf16: split-KV %8.1f us  %5.2f TB/s  (splits %lld, supports %d)",
            B, Skv, ms * 1e3, bytes / (ms * 1e-3) / 1e12, (long long)plan.splits,
            int(ja::DecodeSplitSupports(a)));
        if (mode == "sweep") {
          // Every split count the workspace holds, in steps: which fills the GPU best.
          const int64_t most = ja::MakeDecodeSplitPlan(s).splits;
          std::printf("\n  sweep:");
          for (int64_t want = most; want >= 1; want = want > 8 ? want - (want > 32 ? 8 : 2) : want - 1) {
            const ja::DecodeSplitPlan cand = ja::DecodeSplitPlanWithSplits(s, want);
            const float cms =
                MedianMs([&] { return ja::LaunchAttentionFwdDecodeSplit(a, cand, stream); }, stream);
            std::printf(" %lld=%.1f", (long long)cand.splits, cms * 1e3);
          }
        }
        if (ja::Sm90ForwardSupports(a)) {
          const float hms = MedianMs([&] { return ja::LaunchAttentionFwdSm90(a, stream); }, stream);
          std::printf("   sm90 forward %8.1f us  %5.2f TB/s", hms * 1e3, bytes / (hms * 1e-3) / 1e12);
        }
        std::printf("\n");
        std::fflush(stdout);
        for (void* p :
             {buf.q, buf.out, buf.k, buf.v, static_cast<void*>(buf.lse), static_cast<void*>(buf.ws)}) {
          CHECK_CUDA(cudaFree(p));
        }
      }
    }
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  std::printf(all_ok ? "ALL PASSED\n" : "SOME FAILED\n");
  return all_ok ? 0 : 1;
}
