// Standalone self-test and benchmark of the Hopper (sm_90a) attention forward
// (cpp/attention/hopper). Random inputs from a fixed-seed host RNG, uniform in
// [-1, 1] and never zero; a naive fp32 reference kernel (one warp per query
// row); outputs poisoned with 0xFF bytes (NaN) before each checked launch.
// Prints max abs / relative L2 errors of out and lse and the median TFLOP/s of
// 20 timed launches after 5 warm-ups. Exit code 1 on any failure.
// Every launch gets a 64-float workspace (zeroed here once; the launcher
// zeroes its first int before each dynamic launch), so variant 9 (the dynamic
// tile scheduler) runs over the whole grid like any other variant, and the
// "ab" mode checks it and times it against the default on causal grids.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attention/problem.h"
#include "../common/selftest_util.cuh"
#include "attention/sm90/forward.h"

using jaxdnn::attention::AttnFwdArgs;

using namespace sm90_selftest;

namespace {

// One warp per (b, h, i) query row, fp32 online softmax over keys in order.
template <typename T>
__global__ void ReferenceFwd(const T* q, const T* k, const T* v, float* out, float* lse, int B, int Sq,
                             int Skv, int H, int Hk, int D, float scale, int causal) {
  const int64_t row_id = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row_id >= static_cast<int64_t>(B) * H * Sq) return;
  const int i = static_cast<int>(row_id % Sq);
  const int h = static_cast<int>((row_id / Sq) % H);
  const int b = static_cast<int>(row_id / (static_cast<int64_t>(Sq) * H));
  const int hk = h / (H / Hk);
  constexpr int kMaxPer = 8;  // head dim up to 256
  const int per = D / 32;     // 2, 4 or 8
  float qr[kMaxPer], acc[kMaxPer] = {};
  const T* qp = q + ((static_cast<int64_t>(b) * Sq + i) * H + h) * D + lane * per;
#pragma unroll
  for (int d = 0; d < kMaxPer; ++d) qr[d] = d < per ? ToF(qp[d]) : 0.f;
  float m = -INFINITY, l = 0.f;
  const int hi = causal ? min(Skv, i + 1) : Skv;
  for (int j = 0; j < hi; ++j) {
    const int64_t kvo = ((static_cast<int64_t>(b) * Skv + j) * Hk + hk) * D + lane * per;
    float dot = 0.f;
#pragma unroll
    for (int d = 0; d < kMaxPer; ++d)
      if (d < per) dot += qr[d] * ToF(k[kvo + d]);
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    const float x = dot * scale;
    const float mn = fmaxf(m, x);
    const float c = expf(m - mn);
    const float pj = expf(x - mn);
    l = l * c + pj;
#pragma unroll
    for (int d = 0; d < kMaxPer; ++d)
      if (d < per) acc[d] = acc[d] * c + pj * ToF(v[kvo + d]);
    m = mn;
  }
  float* op = out + ((static_cast<int64_t>(b) * Sq + i) * H + h) * D + lane * per;
#pragma unroll
  for (int d = 0; d < kMaxPer; ++d)
    if (d < per) op[d] = l > 0.f ? acc[d] / l : 0.f;
  if (lane == 0) lse[(static_cast<int64_t>(b) * H + h) * Sq + i] = l > 0.f ? m + logf(l) : -INFINITY;
}

struct Case {
  int B, Sq, Skv, H, Hk, D, causal;
  bool check;
};

// The FFI's size for the dynamic scheduler's counter (SM90_TILE_COUNTER_ELEMS
// in jaxdnn/attention/primitives.py).
constexpr int64_t kWorkspaceElems = 64;
constexpr int kDynamicVariant = 9;      // 8: dynamic scheduler (+1 pingpong)
constexpr int kDynamicLptVariant = 25;  // + 16: L2-chunked longest-first tile order

// Device buffers sized for the largest case, a stream and timing events.
struct Buffers {
  void *q, *k, *v, *out;
  float *lse, *ref_out, *ref_lse;
  float* workspace;  // the dynamic scheduler's claim counter (first element, as int32)
  cudaStream_t stream;
  cudaEvent_t e0, e1;
};

AttnFwdArgs MakeArgs(const Case& c, bool f16, const Buffers& b) {
  AttnFwdArgs a{};
  a.shape.batch = c.B;
  a.shape.q_len = c.Sq;
  a.shape.kv_len = c.Skv;
  a.shape.heads = c.H;
  a.shape.kv_heads = c.Hk;
  a.shape.head_dim = c.D;
  a.dtype = f16 ? jaxdnn::ffi::DataType::F16 : jaxdnn::ffi::DataType::BF16;
  a.q = b.q;
  a.k = b.k;
  a.v = b.v;
  a.mask_params.scale = 1.f / std::sqrt(static_cast<float>(c.D));
  a.mask_params.causal = c.causal != 0;
  a.out = b.out;
  a.lse = b.lse;
  a.workspace = b.workspace;
  a.workspace_elems = kWorkspaceElems;
  return a;
}

struct Errors {
  double out_max = 0, out_l2 = 0, lse_max = 0, lse_l2 = 0;
  long long nonfinite = 0;
  bool ok() const { return nonfinite == 0 && out_l2 <= 1e-2 && lse_l2 <= 1e-2; }
};

// Launches `variant` on poisoned outputs and (if check) compares with the
// reference; the raw outputs are left in out_bits / lse_vals.
Errors CheckLaunch(const Case& c, bool f16, int variant, bool check, const Buffers& b,
                   std::vector<uint16_t>& out_bits, std::vector<float>& lse_vals) {
  const AttnFwdArgs a = MakeArgs(c, f16, b);
  const size_t nq = static_cast<size_t>(c.B) * c.Sq * c.H * c.D;
  const size_t nl = static_cast<size_t>(c.B) * c.H * c.Sq;
  CHECK_CUDA(cudaMemsetAsync(b.out, 0xFF, nq * 2, b.stream));
  CHECK_CUDA(cudaMemsetAsync(b.lse, 0xFF, nl * 4, b.stream));
  CHECK_CUDA(jaxdnn::attention::LaunchAttentionFwdSm90Variant(a, b.stream, variant));
  CHECK_CUDA(cudaStreamSynchronize(b.stream));
  Errors e;
  out_bits.resize(nq);
  lse_vals.resize(nl);
  CHECK_CUDA(cudaMemcpy(out_bits.data(), b.out, nq * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(lse_vals.data(), b.lse, nl * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < nq; ++i) e.nonfinite += !std::isfinite(HostToF(out_bits[i], f16));
  for (size_t i = 0; i < nl; ++i) e.nonfinite += std::isnan(lse_vals[i]);
  if (!check) return e;
  const int threads = 256;
  const int64_t rows = static_cast<int64_t>(c.B) * c.H * c.Sq;
  const int blocks = static_cast<int>((rows * 32 + threads - 1) / threads);
  if (f16) {
    ReferenceFwd<__half><<<blocks, threads, 0, b.stream>>>(
        static_cast<const __half*>(b.q), static_cast<const __half*>(b.k), static_cast<const __half*>(b.v),
        b.ref_out, b.ref_lse, c.B, c.Sq, c.Skv, c.H, c.Hk, c.D, a.mask_params.scale, c.causal);
  } else {
    ReferenceFwd<__nv_bfloat16><<<blocks, threads, 0, b.stream>>>(
        static_cast<const __nv_bfloat16*>(b.q), static_cast<const __nv_bfloat16*>(b.k),
        static_cast<const __nv_bfloat16*>(b.v), b.ref_out, b.ref_lse, c.B, c.Sq, c.Skv, c.H, c.Hk, c.D,
        a.mask_params.scale, c.causal);
  }
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaStreamSynchronize(b.stream));
  std::vector<float> hro(nq), hrl(nl);
  CHECK_CUDA(cudaMemcpy(hro.data(), b.ref_out, nq * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hrl.data(), b.ref_lse, nl * 4, cudaMemcpyDeviceToHost));
  double out_ref = 0, lse_ref = 0;
  for (size_t i = 0; i < nq; ++i) {
    const double d = static_cast<double>(HostToF(out_bits[i], f16)) - hro[i];
    e.out_max = std::max(e.out_max, std::fabs(d));
    e.out_l2 += d * d;
    out_ref += static_cast<double>(hro[i]) * hro[i];
  }
  for (size_t i = 0; i < nl; ++i) {
    const double d = static_cast<double>(lse_vals[i]) - hrl[i];
    e.lse_max = std::max(e.lse_max, std::fabs(d));
    e.lse_l2 += d * d;
    lse_ref += static_cast<double>(hrl[i]) * hrl[i];
  }
  e.out_l2 = std::sqrt(e.out_l2 / std::max(out_ref, 1e-30));
  e.lse_l2 = std::sqrt(e.lse_l2 / std::max(lse_ref, 1e-30));
  return e;
}

// Median of 20 timed launches after 5 warm-ups, in ms.
double MedianMs(const AttnFwdArgs& a, int variant, const Buffers& b) {
  for (int i = 0; i < 5; ++i)
    CHECK_CUDA(jaxdnn::attention::LaunchAttentionFwdSm90Variant(a, b.stream, variant));
  std::vector<float> ms(20);
  for (int i = 0; i < 20; ++i) {
    CHECK_CUDA(cudaEventRecord(b.e0, b.stream));
    CHECK_CUDA(jaxdnn::attention::LaunchAttentionFwdSm90Variant(a, b.stream, variant));
    CHECK_CUDA(cudaEventRecord(b.e1, b.stream));
    CHECK_CUDA(cudaEventSynchronize(b.e1));
    CHECK_CUDA(cudaEventElapsedTime(&ms[i], b.e0, b.e1));
  }
  std::sort(ms.begin(), ms.end());
  return 0.5 * (ms[9] + ms[10]);
}

double Tflops(const Case& c, double ms) {
  double flops = 4.0 * c.B * c.H * static_cast<double>(c.Sq) * c.Skv * c.D;
  if (c.causal) flops *= 0.5;
  return flops / (ms * 1e-3) / 1e12;
}

// Prints the case as (B,Sq,Skv,H,Hk,D,causal) into `name`; false, after a
// FAIL line, when the sm90 forward does not take it.
bool NameAndSupported(const Case& c, const AttnFwdArgs& a, char (&name)[64]) {
  std::snprintf(name, sizeof(name), "(%d,%d,%d,%d,%d,%d,%d)", c.B, c.Sq, c.Skv, c.H, c.Hk, c.D, c.causal);
  if (jaxdnn::attention::Sm90ForwardSupports(a)) return true;
  std::printf("%-34s FAIL: Sm90ForwardSupports() is false\n", name);
  return false;
}

Buffers AllocBuffers(const std::vector<Case>& cases, bool f16) {
  size_t max_q = 0, max_kv = 0, max_lse = 0;
  for (const Case& c : cases) {
    max_q = std::max(max_q, static_cast<size_t>(c.B) * c.Sq * c.H * c.D);
    max_kv = std::max(max_kv, static_cast<size_t>(c.B) * c.Skv * c.Hk * c.D);
    max_lse = std::max(max_lse, static_cast<size_t>(c.B) * c.H * c.Sq);
  }
  std::printf("generating inputs (%zu q, %zu kv elements)...\n", max_q, max_kv);
  const std::vector<uint16_t> hq = RandomBits(max_q, f16), hk = RandomBits(max_kv, f16),
                              hv = RandomBits(max_kv, f16);
  Buffers b;
  CHECK_CUDA(cudaMalloc(&b.q, max_q * 2));
  CHECK_CUDA(cudaMalloc(&b.k, max_kv * 2));
  CHECK_CUDA(cudaMalloc(&b.v, max_kv * 2));
  CHECK_CUDA(cudaMalloc(&b.out, max_q * 2));
  CHECK_CUDA(cudaMalloc(&b.lse, max_lse * 4));
  CHECK_CUDA(cudaMalloc(&b.ref_out, max_q * 4));
  CHECK_CUDA(cudaMalloc(&b.ref_lse, max_lse * 4));
  CHECK_CUDA(cudaMalloc(&b.workspace, kWorkspaceElems * 4));
  CHECK_CUDA(cudaMemset(b.workspace, 0, kWorkspaceElems * 4));
  CHECK_CUDA(cudaMemcpy(b.q, hq.data(), max_q * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(b.k, hk.data(), max_kv * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(b.v, hv.data(), max_kv * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaStreamCreate(&b.stream));
  CHECK_CUDA(cudaEventCreate(&b.e0));
  CHECK_CUDA(cudaEventCreate(&b.e1));
  return b;
}

void FreeBuffers(Buffers& b) {
  for (void* ptr : {b.q, b.k, b.v, b.out, static_cast<void*>(b.lse), static_cast<void*>(b.ref_out),
                    static_cast<void*>(b.ref_lse), static_cast<void*>(b.workspace)}) {
    CHECK_CUDA(cudaFree(ptr));
  }
  CHECK_CUDA(cudaStreamDestroy(b.stream));
  CHECK_CUDA(cudaEventDestroy(b.e0));
  CHECK_CUDA(cudaEventDestroy(b.e1));
}

// The dynamic tile scheduler against the default (one CTA per tile) on causal
// grids, batch x seq = 16k tokens, 16 heads, head dim 128 and 64 (plus odd
// lengths, GQA and head dim 256 for the check): each case first checked in
// the dynamic variant against the fp32 reference (and the chunked-order one,
// 25), then timed in all (and in the static persistent variant 3 for scale).
// Returns false on a failure.
bool RunDynamicAb(bool f16) {
  const int def = 1;  // the default for causal cases without the switch
  std::vector<Case> cases;
  for (int d : {128, 64}) {
    for (int s : {1024, 2048, 4096, 8192, 16384}) cases.push_back({16384 / s, s, s, 16, 16, d, 1, true});
  }
  const std::vector<Case> extra = {
      {2, 1000, 1000, 3, 1, 128, 1, true}, {1, 1537, 1537, 4, 2, 256, 1, true},
      {3, 777, 777, 8, 2, 64, 1, true},    {8, 2048, 2048, 16, 16, 256, 1, true},
      {2, 1000, 1000, 4, 2, 128, 0, true}, {1, 1, 1, 1, 1, 128, 1, true},
  };
  cases.insert(cases.end(), extra.begin(), extra.end());
  Buffers b = AllocBuffers(cases, f16);
  bool all_ok = true;
  std::printf("%-34s %10s %10s %9s | %8s %8s %8s %8s %7s %7s\n", "dynamic (9) vs default (1)", "out_relL2",
              "lse_relL2", "check", "TF/s v1", "TF/s v3", "TF/s v9", "TF/s v25", "v9/v1", "v25/v1");
  std::vector<uint16_t> gout;
  std::vector<float> glse;
  for (const Case& c : cases) {
    const AttnFwdArgs a = MakeArgs(c, f16, b);
    char name[64];
    if (!NameAndSupported(c, a, name)) {
      all_ok = false;
      continue;
    }
    const Errors e = CheckLaunch(c, f16, kDynamicVariant, c.check, b, gout, glse);
    // A rerun must give the same bits (another claim order, same tiles).
    std::vector<uint16_t> gout2;
    std::vector<float> glse2;
    CheckLaunch(c, f16, kDynamicVariant, false, b, gout2, glse2);
    bool same = gout2 == gout && std::memcmp(glse2.data(), glse.data(), glse.size() * 4) == 0;
    // The chunked order computes the same tiles: the same bits again.
    CheckLaunch(c, f16, kDynamicLptVariant, false, b, gout2, glse2);
    same = same && gout2 == gout && std::memcmp(glse2.data(), glse.data(), glse.size() * 4) == 0;
    const bool ok = e.ok() && same;
    const double t1 = Tflops(c, MedianMs(a, def, b));
    const double t3 = Tflops(c, MedianMs(a, 3, b));
    const double t9 = Tflops(c, MedianMs(a, kDynamicVariant, b));
    const double t25 = Tflops(c, MedianMs(a, kDynamicLptVariant, b));
    std::printf("%-34s %10.3g %10.3g %9s | %8.1f %8.1f %8.1f %8.1f %6.3fx %6.3fx\n", name, e.out_l2, e.lse_l2,
                ok ? "ok" : (same ? "FAIL" : "FAIL(bits differ)"), t1, t3, t9, t25, t9 / t1, t25 / t1);
    std::fflush(stdout);
    all_ok = all_ok && ok;
  }
  FreeBuffers(b);
  return all_ok;
}

}  // namespace

int main(int argc, char** argv) {
  // Usage: sm90_attention_selftest [bf16|f16] [variant (-1: default; 9: dynamic scheduler,
  //          25: with the chunked order; 35 = 3 + 32: 80-key blocks at head dim 256,
  //          67 = 3 + 64: three consumer warpgroups at head dim 64; both dense
  //          non-causal, the bits ignored elsewhere; 89 = 25 + 64: three
  //          consumer warpgroups on the dynamic scheduler, dense, causal or not;
  //          131 = 3 + 128, 163 = 35 + 128: clusters of two CTAs with K/V
  //          multicast at head dims 128 and 256, dense non-causal problems with
  //          an even number of query tiles per (batch, head), the bit ignored elsewhere)]
  //          [head dim (0: all)]
  //        e.g. sm90_attention_selftest bf16 35 256
  //        sm90_attention_selftest [bf16|f16] ab    the dynamic scheduler: checks, then A/B timings
  const bool f16 = argc > 1 && std::string(argv[1]) == "f16";
  if (argc > 2 && std::string(argv[2]) == "ab") {
    int dev = 0;
    CHECK_CUDA(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
    std::printf("device: %s (sm_%d%d, %d SMs), dtype %s, dynamic scheduler A/B\n", prop.name, prop.major,
                prop.minor, prop.multiProcessorCount, f16 ? "f16" : "bf16");
    const bool ok = RunDynamicAb(f16);
    std::printf("%s\n", ok ? "ALL PASSED" : "SOME FAILED");
    return ok ? 0 : 1;
  }
  const int variant = argc > 2 ? std::atoi(argv[2]) : jaxdnn::attention::kSm90DefaultVariant;
  const int only_d = argc > 3 ? std::atoi(argv[3]) : 0;
  int dev = 0;
  CHECK_CUDA(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s (sm_%d%d, %d SMs), dtype %s, variant %d\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, f16 ? "f16" : "bf16", variant);

  std::vector<Case> cases = {
      {1, 128, 128, 1, 1, 128, 0, true},
      {1, 128, 128, 1, 1, 128, 1, true},
      {2, 1000, 1000, 3, 1, 128, 1, true},
      {2, 1000, 1000, 3, 1, 128, 0, true},
      {2, 200, 1000, 4, 2, 128, 0, true},
      {2, 1000, 1000, 4, 2, 64, 1, true},
      {2, 200, 1000, 4, 2, 64, 0, true},
      {8, 2048, 2048, 16, 16, 128, 0, true},
      {8, 2048, 2048, 16, 16, 128, 1, true},
      {4, 4096, 4096, 16, 16, 128, 0, true},
      {4, 4096, 4096, 16, 16, 128, 1, true},
      {2, 8192, 8192, 16, 16, 128, 0, false},
      {2, 8192, 8192, 16, 16, 128, 1, false},
      {1, 16384, 16384, 16, 16, 128, 0, false},
      {1, 16384, 16384, 16, 16, 128, 1, true},
      {8, 2048, 2048, 16, 16, 64, 0, true},
      {8, 2048, 2048, 16, 16, 64, 1, true},
      {2, 8192, 8192, 16, 16, 64, 1, false},
      // Head dim 256 (64-key blocks, O staged in Q's buffer): odd lengths,
      // GQA, a causal diagonal that crosses two kv blocks per query tile.
      {1, 1, 1, 1, 1, 256, 0, true},
      {1, 1, 1, 1, 1, 256, 1, true},
      {2, 7, 7, 4, 2, 256, 0, true},
      {2, 7, 7, 4, 2, 256, 1, true},
      {2, 1000, 1000, 3, 1, 256, 0, true},
      {2, 1000, 1000, 3, 1, 256, 1, true},
      {1, 1537, 1537, 4, 2, 256, 0, true},
      {1, 1537, 1537, 4, 2, 256, 1, true},
      {2, 200, 1000, 4, 2, 256, 0, true},
      {2, 1000, 7, 4, 1, 256, 0, true},
      // Around 80 keys (variant bit 32, 80-key blocks: a partial last block
      // of 79, 1, 1 and 41 keys; one block exactly; q_len != kv_len; GQA).
      {2, 79, 79, 4, 2, 256, 0, true},
      {2, 81, 81, 3, 1, 256, 0, true},
      {1, 161, 161, 4, 4, 256, 0, true},
      {2, 80, 80, 4, 2, 256, 0, true},
      {2, 200, 161, 4, 2, 256, 0, true},
      {1, 81, 1001, 4, 1, 256, 0, true},
      {2, 81, 81, 3, 1, 256, 1, true},
      // Head dim 64 around 192-row tiles (variant bit 64, three consumer
      // warpgroups: partial last tiles of 191, 1, 1 and 8 rows; q_len !=
      // kv_len; GQA), then the head dim 64 benchmark grid.
      {2, 191, 191, 4, 2, 64, 0, true},
      {2, 193, 193, 3, 1, 64, 0, true},
      {1, 385, 385, 4, 4, 64, 0, true},
      {2, 200, 1001, 4, 2, 64, 0, true},
      {1, 7, 7, 4, 1, 64, 0, true},
      {2, 1000, 200, 4, 2, 64, 0, true},
      {32, 512, 512, 16, 16, 64, 0, true},
      {16, 1024, 1024, 16, 16, 64, 0, true},
      {4, 4096, 4096, 16, 16, 64, 0, true},
      {1, 16384, 16384, 16, 16, 64, 0, false},
      // Causal around 192-row tiles (variant bit 64 with the dynamic
      // scheduler, 89 = 25 + 64: each tile's diagonal crosses two 128-key
      // blocks at 1.5 blocks per tile; last tiles of 191, 1, 1, 1 rows).
      {2, 191, 191, 4, 2, 64, 1, true},
      {1, 385, 385, 4, 4, 64, 1, true},
      {1, 7, 7, 4, 1, 64, 1, true},
      {1, 577, 577, 4, 2, 64, 1, true},
      {2, 193, 193, 3, 1, 64, 1, true},
      {32, 512, 512, 16, 16, 64, 1, true},
      {16, 1024, 1024, 16, 16, 64, 1, true},
      {4, 4096, 4096, 16, 16, 64, 1, true},
      {1, 16384, 16384, 16, 16, 64, 1, false},
      // Head dim 256 benchmark grid: batch x seq = 16384 tokens, 16 heads.
      {32, 512, 512, 16, 16, 256, 0, true},
      {32, 512, 512, 16, 16, 256, 1, true},
      {16, 1024, 1024, 16, 16, 256, 0, true},
      {16, 1024, 1024, 16, 16, 256, 1, true},
      {8, 2048, 2048, 16, 16, 256, 0, true},
      {8, 2048, 2048, 16, 16, 256, 1, true},
      {4, 4096, 4096, 16, 16, 256, 0, true},
      {4, 4096, 4096, 16, 16, 256, 1, true},
      {2, 8192, 8192, 16, 16, 256, 0, false},
      {2, 8192, 8192, 16, 16, 256, 1, true},
      {1, 16384, 16384, 16, 16, 256, 0, false},
      {1, 16384, 16384, 16, 16, 256, 1, false},
  };
  if (only_d != 0) {
    cases.erase(std::remove_if(cases.begin(), cases.end(), [&](const Case& c) { return c.D != only_d; }),
                cases.end());
  }

  Buffers b = AllocBuffers(cases, f16);
  bool all_ok = true;
  std::printf("%-34s %10s %10s %10s %10s %9s %8s\n", "case (B,Sq,Skv,H,Hk,D,causal)", "out_maxabs",
              "out_relL2", "lse_maxabs", "lse_relL2", "ms", "TFLOP/s");
  std::vector<uint16_t> gout;
  std::vector<float> glse;
  for (const Case& c : cases) {
    const AttnFwdArgs a = MakeArgs(c, f16, b);
    char name[64];
    if (!NameAndSupported(c, a, name)) {
      all_ok = false;
      continue;
    }
    // Correctness (poisoned outputs first), then timing.
    const Errors e = CheckLaunch(c, f16, variant, c.check, b, gout, glse);
    const bool case_ok = e.ok();
    const double med = MedianMs(a, variant, b);
    const double tflops = Tflops(c, med);
    if (c.check) {
      std::printf("%-34s %10.3g %10.3g %10.3g %10.3g %9.3f %8.1f %s%s\n", name, e.out_max, e.out_l2,
                  e.lse_max, e.lse_l2, med, tflops, case_ok ? "ok" : "FAIL",
                  e.nonfinite ? " (non-finite outputs)" : "");
    } else {
      std::printf("%-34s %10s %10s %10s %10s %9.3f %8.1f %s%s\n", name, "-", "-", "-", "-", med, tflops,
                  case_ok ? "ok (finite only)" : "FAIL", e.nonfinite ? " (non-finite outputs)" : "");
    }
    std::fflush(stdout);
    all_ok = all_ok && case_ok;
  }
  std::printf("%s\n", all_ok ? "ALL PASSED" : "SOME FAILED");
  FreeBuffers(b);
  return all_ok ? 0 : 1;
}
