// Standalone self-test and benchmark of the Hopper (sm_90a) attention backward
// (cpp/attention/sm90/backward.*). Inputs q, k, v, dout from a
// fixed-seed host RNG, uniform in [-1, 1] and never zero; out and lse from the
// sm90 forward; a naive fp32 reference backward on the GPU (one warp per query
// row for dq and delta, one warp per key row for dk/dv); gradients poisoned
// with 0xFF bytes before each checked launch; determinism = two runs compared
// bytewise. Timing: median of 10 launches of the whole backward (delta
// pre-pass, dK/dV, dQ, GQA reduction). Exit code 1 on any failure.
// Usage: sm90_attention_bwd_selftest [probe|check|all|fused|fusedcheck|atomic|atomiccheck|ext|d256|seg]
//   seg: packed documents (segment ids) through the fused backward's segment
//   path, both dQ modes, against the masked reference (SegCases of
//   sm90_attention_bwd_ext_selftest.cuh), then the timing case (2x8192, 16
//   heads, d128, causal, exponential document lengths of mean 1024) next to
//   the two-kernel backward. In the unordered mode also the 80-query segment
//   steps (variant 404, forced whatever JAXDNN_ATTENTION_SM90_BWD_Q80_SEG
//   says: SegQ80Cases, d128, causal from each key block's diagonal and not,
//   lengths 1, 7, 79, 81, 161, 1000, 1537, 2048, documents around 16- and
//   80-row edges, GQA, bf16 and f16) and the timing case with it.
//   fusedcheck / atomiccheck also run the segment reference cases in their
//   dQ mode (after the dense ones).
//   d256: head dim 256 (off by default in the library; this mode sets
//   JAXDNN_ATTENTION_SM90_BWD_D256=1 itself): reference checks (non-causal and
//   causal, GQA 4, lengths 1, 7, 1000, 1537, bf16 and f16, variants 0 and 8),
//   determinism, the masked d256 cases of sm90_attention_bwd_ext_selftest.cuh,
//   then timings of the grid (batch x seq = 16384, 16 heads, seq 1024..16384,
//   causal and not).
//   ext: the masked cases (lengths, bottom-right causal, windows, segment ids,
//   softcap) against a masked reference, and a packed-document timing (see
//   sm90_attention_bwd_ext_selftest.cuh).
//   fused, fusedcheck: the same cases (fusedcheck: the reference cases only)
//   through the fused backward (cpp/attention/sm90/backward_fused.*): reference
//   check of every fused variant (0-7; at head dim 64 also 8 and 12, the
//   128-query steps, with a bytewise rerun; at head dim 128 also 128, 132 and
//   165, the 80-query steps of the unordered mode, which the ordered mode
//   ignores, and for causal cases 144, 148 and 181, the 80-query steps from
//   each key block's diagonal), determinism = three runs compared bytewise,
//   and timings of the fused backward next to the two-kernel one.
//   atomic, atomiccheck: as fused / fusedcheck with the fused kernel's
//   unordered dQ mode (deterministic = false, JAXDNN_ATTENTION_SM90_BWD_ATOMIC
//   set here): dK and dV must still be bit-identical across runs, dQ only
//   close; timings next to the ordered fused kernel and the two-kernel one.
//   The default launch (variant -1) drops bit 128 for causal calls unless
//   JAXDNN_ATTENTION_SM90_BWD_Q80_CAUSAL=1 is set in the environment (then
//   181); the explicit variants above run causal 80-query steps either way.
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
#include "sm90_attention_bwd_ext_selftest.cuh"
#include "attention/sm90/backward.h"
#include "attention/sm90/backward_fused.h"
#include "attention/sm90/forward.h"

using jaxdnn::attention::AttnBwdArgs;
using jaxdnn::attention::AttnFwdArgs;

using namespace sm90_selftest;

namespace {

__device__ __forceinline__ float WarpSum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// One warp per (b, h, i) query row: delta and dq (fp32).
template <typename T>
__global__ void RefDq(const T* q, const T* k, const T* v, const T* out, const T* dout, const float* lse,
                      float* delta, float* dq, int B, int Sq, int Skv, int H, int Hk, int D, float scale,
                      int causal) {
  const int64_t row_id = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row_id >= static_cast<int64_t>(B) * H * Sq) return;
  const int i = static_cast<int>(row_id % Sq);
  const int h = static_cast<int>((row_id / Sq) % H);
  const int b = static_cast<int>(row_id / (static_cast<int64_t>(Sq) * H));
  const int hk = h / (H / Hk);
  const int per = D / 32;
  const int64_t qo = ((static_cast<int64_t>(b) * Sq + i) * H + h) * D + lane * per;
  float qr[8], dor[8], acc[8] = {};  // per = D / 32 <= 8 (head dim <= 256)
  float dl = 0.f;
  for (int d = 0; d < 8; ++d) {
    qr[d] = d < per ? ToF(q[qo + d]) : 0.f;
    dor[d] = d < per ? ToF(dout[qo + d]) : 0.f;
    if (d < per) dl += dor[d] * ToF(out[qo + d]);
  }
  dl = WarpSum(dl);
  const float l = lse[(static_cast<int64_t>(b) * H + h) * Sq + i];
  const int hi = causal ? min(Skv, i + 1) : Skv;
  for (int j = 0; j < hi; ++j) {
    const int64_t kvo = ((static_cast<int64_t>(b) * Skv + j) * Hk + hk) * D + lane * per;
    float sd = 0.f, pd = 0.f;
    for (int d = 0; d < 8; ++d) {
      if (d < per) {
        sd += qr[d] * ToF(k[kvo + d]);
        pd += dor[d] * ToF(v[kvo + d]);
      }
    }
    sd = WarpSum(sd);
    pd = WarpSum(pd);
    const float pj = expf(sd * scale - l);
    const float ds = pj * (pd - dl);
    for (int d = 0; d < 8; ++d)
      if (d < per) acc[d] += ds * ToF(k[kvo + d]);
  }
  for (int d = 0; d < 8; ++d)
    if (d < per) dq[qo + d] = acc[d] * scale;
  if (lane == 0) delta[(static_cast<int64_t>(b) * H + h) * Sq + i] = dl;
}

// One warp per (b, hk, j) key row: dk, dv (fp32), summing the group's heads.
template <typename T>
__global__ void RefDkDv(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                        const float* delta, float* dk, float* dv, int B, int Sq, int Skv, int H, int Hk,
                        int D, float scale, int causal) {
  const int64_t row_id = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row_id >= static_cast<int64_t>(B) * Hk * Skv) return;
  const int j = static_cast<int>(row_id % Skv);
  const int hk = static_cast<int>((row_id / Skv) % Hk);
  const int b = static_cast<int>(row_id / (static_cast<int64_t>(Skv) * Hk));
  const int group = H / Hk;
  const int per = D / 32;
  const int64_t kvo = ((static_cast<int64_t>(b) * Skv + j) * Hk + hk) * D + lane * per;
  float kr[8], vr[8], ak[8] = {}, av[8] = {};
  for (int d = 0; d < 8; ++d) {
    kr[d] = d < per ? ToF(k[kvo + d]) : 0.f;
    vr[d] = d < per ? ToF(v[kvo + d]) : 0.f;
  }
  for (int gi = 0; gi < group; ++gi) {
    const int h = hk * group + gi;
    for (int i = causal ? j : 0; i < Sq; ++i) {
      const int64_t qo = ((static_cast<int64_t>(b) * Sq + i) * H + h) * D + lane * per;
      float sd = 0.f, pd = 0.f;
      for (int d = 0; d < 8; ++d) {
        if (d < per) {
          sd += kr[d] * ToF(q[qo + d]);
          pd += vr[d] * ToF(dout[qo + d]);
        }
      }
      sd = WarpSum(sd);
      pd = WarpSum(pd);
      const int64_t lo = (static_cast<int64_t>(b) * H + h) * Sq + i;
      const float pj = expf(sd * scale - lse[lo]);
      const float ds = pj * (pd - delta[lo]);
      for (int d = 0; d < 8; ++d) {
        if (d < per) {
          av[d] += pj * ToF(dout[qo + d]);
          ak[d] += ds * ToF(q[qo + d]);
        }
      }
    }
  }
  for (int d = 0; d < 8; ++d) {
    if (d < per) {
      dk[kvo + d] = ak[d] * scale;
      dv[kvo + d] = av[d];
    }
  }
}

struct Case {
  int B, S, H, Hk, D, causal;
  bool f16;
  bool check;  // reference comparison (small cases); else finite + determinism only
};

struct Err {
  double max_abs = 0, rel_l2 = 0;
  long long nonfinite = 0;
};

Err Compare(const std::vector<uint16_t>& got, const std::vector<float>& ref, bool f16) {
  Err e;
  double l2 = 0, r2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = HostToF(got[i], f16);
    if (!std::isfinite(g)) {
      ++e.nonfinite;
      continue;
    }
    const double d = static_cast<double>(g) - ref[i];
    e.max_abs = std::max(e.max_abs, std::fabs(d));
    l2 += d * d;
    r2 += static_cast<double>(ref[i]) * ref[i];
  }
  // Relative to the reference, but not below an RMS of 1e-3: with one key
  // (seq 1) dQ and dK are exactly zero and any rounding would read as a huge
  // relative error.
  e.rel_l2 = std::sqrt(l2 / std::max(r2, 1e-6 * static_cast<double>(got.size())));
  return e;
}

long long CountNonFinite(const std::vector<uint16_t>& got, bool f16) {
  long long n = 0;
  for (uint16_t b : got) n += !std::isfinite(HostToF(b, f16));
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  const bool atomic = mode == "atomic" || mode == "atomiccheck";
  const bool fused = mode == "fused" || mode == "fusedcheck" || atomic;
  // Before the first Sm90FusedBackwardOrdered call (the switch is read once).
  if (atomic) setenv("JAXDNN_ATTENTION_SM90_BWD_ATOMIC", "1", 1);
  int dev = 0;
  CHECK_CUDA(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  if (mode == "probe") return 0;
  if (mode == "ext") return sm90_bwd_ext::RunExtMode();
  if (mode == "seg") {
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreate(&s));
    const bool ok = sm90_bwd_ext::RunSegCases(s, true, true, true);
    std::printf("%s\n", ok ? "ALL PASSED" : "SOME FAILED");
    return ok ? 0 : 1;
  }
  const bool d256 = mode == "d256";
  // Before the first Supports call (the library reads the switch once).
  if (d256) setenv("JAXDNN_ATTENTION_SM90_BWD_D256", "1", 1);

  std::vector<Case> cases = {
      // B, S, H, Hk, D, causal, f16, check
      {1, 128, 1, 1, 128, 0, false, true},
      {1, 128, 1, 1, 128, 1, false, true},
      {2, 1000, 4, 2, 128, 1, false, true},
      {2, 384, 2, 2, 64, 0, false, true},
      {2, 1000, 4, 2, 128, 0, true, true},
      {1, 1000, 2, 1, 64, 1, true, true},
      {1, 200, 3, 3, 64, 1, false, true},
      {2, 1536, 2, 2, 128, 1, false, true},
      // Head dim 64 odd lengths (the fused 128-query-step variants 8 and 12:
      // 1537 = 25 64-row blocks, the last 128-query step has one; 1000 = 16).
      {1, 1537, 2, 2, 64, 1, false, true},
      {2, 1537, 4, 2, 64, 0, true, true},
      {2, 1000, 2, 2, 64, 0, false, true},
      {1, 1000, 2, 2, 64, 1, false, true},
      {1, 7, 2, 2, 64, 1, false, true},
      // Head dim 128 non-causal lengths around 80 (the fused 80-query-step
      // variants 128/132/165: 1 and 7 = one partial step, 79/81 = one step less
      // one row / two steps with a one-row tail, 1000 = 12.5 steps, 1537 = 19.2),
      // GQA, both types.
      {1, 1, 2, 2, 128, 0, false, true},
      {1, 7, 2, 1, 128, 0, true, true},
      {1, 79, 2, 2, 128, 0, false, true},
      {2, 81, 4, 2, 128, 0, true, true},
      {2, 1000, 4, 1, 128, 0, false, true},
      {1, 1537, 4, 2, 128, 0, true, true},
      {1, 1537, 2, 2, 128, 0, false, true},
      // Head dim 128 causal around 80 rows (the causal 80-query steps, bit 128
      // at multiples of 80 and bit 16 from the diagonal: 1, 7 = one partial
      // step; 79, 80, 81 = the first key block's diagonal over one or two
      // steps; 161 = a second key block starting inside step 1 (128 = 80 +
      // 48) and ending in a one-row step; 1000, 1537 = 8 and 13 key blocks,
      // every diagonal offset 128n mod 80), GQA, both types.
      {1, 1, 2, 1, 128, 1, false, true},
      {1, 7, 2, 2, 128, 1, true, true},
      {1, 79, 4, 2, 128, 1, false, true},
      {2, 80, 2, 1, 128, 1, true, true},
      {2, 81, 4, 2, 128, 1, false, true},
      {1, 161, 4, 1, 128, 1, true, true},
      {1, 161, 2, 2, 128, 1, false, true},
      {2, 1000, 4, 2, 128, 1, true, true},
      {1, 1537, 4, 2, 128, 1, false, true},
      {1, 1537, 2, 1, 128, 1, true, true},
  };
  if (d256) {
    cases = {
        // B, S, H, Hk, D, causal, f16, check
        {1, 1, 2, 2, 256, 0, false, true},   {1, 1, 2, 1, 256, 1, true, true},
        {1, 7, 2, 1, 256, 1, true, true},    {1, 7, 2, 2, 256, 0, false, true},
        {1, 128, 1, 1, 256, 1, false, true}, {2, 1000, 4, 1, 256, 0, false, true},
        {2, 1000, 4, 1, 256, 1, true, true}, {1, 1537, 2, 2, 256, 1, false, true},
        {1, 1537, 4, 1, 256, 0, true, true}, {1, 1537, 4, 1, 256, 1, false, true},
    };
  }
  if (mode == "all" || mode == "fused" || mode == "atomic") {
    const int seqs[4][2] = {{8, 2048}, {4, 4096}, {2, 8192}, {1, 16384}};
    for (int c = 0; c < 2; ++c) {
      for (auto& bs : seqs) cases.push_back({bs[0], bs[1], 16, 16, 128, c, false, false});
    }
    cases.push_back({8, 2048, 16, 16, 64, 0, false, false});
    cases.push_back({8, 2048, 16, 16, 64, 1, false, false});
    cases.push_back({2, 8192, 16, 16, 64, 0, false, false});
    cases.push_back({2, 8192, 16, 16, 64, 1, false, false});
    cases.push_back({8, 2048, 16, 4, 128, 1, false, false});
  }

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));

  std::vector<uint16_t> pools_bf16[4], pools_f16[4];
  bool all_ok = true;
  if (d256) {
    // The masked cases first (small), then the dense checks and the timing grid.
    all_ok = sm90_bwd_ext::RunExtD256Cases(stream);
    const int seqs[5][2] = {{16, 1024}, {8, 2048}, {4, 4096}, {2, 8192}, {1, 16384}};
    for (int c = 0; c < 2; ++c) {
      for (auto& bs : seqs) cases.push_back({bs[0], bs[1], 16, 16, 256, c, false, false});
    }
  }
  std::printf("%-30s %-4s %10s %10s %10s %10s %10s %10s %5s %9s %8s\n", "case (B,S,H,Hk,D,causal)", "dt",
              "dq_max", "dq_relL2", "dk_max", "dk_relL2", "dv_max", "dv_relL2", "det", "ms", "TFLOP/s");
  std::fflush(stdout);
  for (const Case& c : cases) {
    const bool f16 = c.f16;
    const size_t nq = static_cast<size_t>(c.B) * c.S * c.H * c.D;
    const size_t nkv = static_cast<size_t>(c.B) * c.S * c.Hk * c.D;
    const size_t nl = static_cast<size_t>(c.B) * c.H * c.S;
    int64_t ws_elems = static_cast<int64_t>(nl) + 2 * static_cast<int64_t>(c.B) * c.S * c.H * c.D;
    if (fused) {
      jaxdnn::attention::AttnShape sh;
      sh.batch = c.B;
      sh.q_len = c.S;
      sh.kv_len = c.S;
      sh.heads = c.H;
      sh.kv_heads = c.Hk;
      sh.head_dim = c.D;
      ws_elems = std::max(ws_elems, jaxdnn::attention::Sm90FusedBwdWorkspaceElems(sh));
    }
    char name[64];
    std::snprintf(name, sizeof(name), "(%d,%d,%d,%d,%d,%d)", c.B, c.S, c.H, c.Hk, c.D, c.causal);
    std::fprintf(stderr, "[running %s %s]\n", name, c.f16 ? "f16" : "bf16");

    // Random pools, generated once per dtype at the largest size; cases take prefixes.
    std::vector<uint16_t>* pool = f16 ? pools_f16 : pools_bf16;
    if (pool[0].size() < nq) {
      size_t mx = 0;
      for (const Case& o2 : cases) {
        if (o2.f16 == f16) mx = std::max(mx, static_cast<size_t>(o2.B) * o2.S * o2.H * o2.D);
      }
      for (int pi = 0; pi < 4; ++pi) pool[pi] = RandomBits(mx, f16);
    }
    const std::vector<uint16_t>&hq = pool[0], &hk = pool[1], &hv = pool[2], &hdo = pool[3];
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *lse, *ws;
    CHECK_CUDA(cudaMalloc(&q, nq * 2));
    CHECK_CUDA(cudaMalloc(&o, nq * 2));
    CHECK_CUDA(cudaMalloc(&dout, nq * 2));
    CHECK_CUDA(cudaMalloc(&dq, nq * 2));
    CHECK_CUDA(cudaMalloc(&k, nkv * 2));
    CHECK_CUDA(cudaMalloc(&v, nkv * 2));
    CHECK_CUDA(cudaMalloc(&dk, nkv * 2));
    CHECK_CUDA(cudaMalloc(&dv, nkv * 2));
    CHECK_CUDA(cudaMalloc(&lse, nl * 4));
    CHECK_CUDA(cudaMalloc(&ws, ws_elems * 4));
    CHECK_CUDA(cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(k, hk.data(), nkv * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(v, hv.data(), nkv * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dout, hdo.data(), nq * 2, cudaMemcpyHostToDevice));

    AttnFwdArgs fa{};
    fa.shape.batch = c.B;
    fa.shape.q_len = c.S;
    fa.shape.kv_len = c.S;
    fa.shape.heads = c.H;
    fa.shape.kv_heads = c.Hk;
    fa.shape.head_dim = c.D;
    fa.dtype = f16 ? jaxdnn::ffi::DataType::F16 : jaxdnn::ffi::DataType::BF16;
    fa.q = q;
    fa.k = k;
    fa.v = v;
    fa.mask_params.scale = 1.f / std::sqrt(static_cast<float>(c.D));
    fa.mask_params.causal = c.causal != 0;
    fa.out = o;
    fa.lse = lse;
    if (!jaxdnn::attention::Sm90ForwardSupports(fa)) {
      std::printf("%-30s FAIL: Sm90ForwardSupports() is false\n", name);
      all_ok = false;
      continue;
    }
    CHECK_CUDA(jaxdnn::attention::LaunchAttentionFwdSm90(fa, stream));

    AttnBwdArgs a{};
    a.shape = fa.shape;
    a.dtype = fa.dtype;
    a.q = q;
    a.k = k;
    a.v = v;
    a.out = o;
    a.lse = lse;
    a.dout = dout;
    a.dlse = nullptr;
    a.mask_params = fa.mask_params;
    a.dq = dq;
    a.dk = dk;
    a.dv = dv;
    a.dbias = nullptr;
    a.workspace = ws;
    a.workspace_elems = ws_elems;
    a.deterministic = !atomic;
    if (atomic && jaxdnn::attention::Sm90FusedBackwardOrdered(a)) {
      std::printf("%-30s FAIL: the unordered dQ mode is not selected\n", name);
      all_ok = false;
      continue;
    }
    if (!jaxdnn::attention::Sm90BackwardSupports(a)) {
      std::printf("%-30s FAIL: Sm90BackwardSupports() is false\n", name);
      all_ok = false;
      continue;
    }
    if (fused && !jaxdnn::attention::Sm90FusedBackwardSupports(a)) {
      std::printf("%-30s FAIL: Sm90FusedBackwardSupports() is false\n", name);
      all_ok = false;
      continue;
    }

    auto run_poisoned = [&](std::vector<uint16_t>& gq, std::vector<uint16_t>& gk, std::vector<uint16_t>& gv) {
      CHECK_CUDA(cudaMemsetAsync(dq, 0xFF, nq * 2, stream));
      CHECK_CUDA(cudaMemsetAsync(dk, 0xFF, nkv * 2, stream));
      CHECK_CUDA(cudaMemsetAsync(dv, 0xFF, nkv * 2, stream));
      CHECK_CUDA(cudaMemsetAsync(ws, 0xFF, ws_elems * 4, stream));
      CHECK_CUDA(fused ? jaxdnn::attention::LaunchAttentionBwdSm90Fused(a, stream)
                       : jaxdnn::attention::LaunchAttentionBwdSm90(a, stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      gq.resize(nq);
      gk.resize(nkv);
      gv.resize(nkv);
      CHECK_CUDA(cudaMemcpy(gq.data(), dq, nq * 2, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(gk.data(), dk, nkv * 2, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(gv.data(), dv, nkv * 2, cudaMemcpyDeviceToHost));
    };
    std::vector<uint16_t> gq1, gk1, gv1, gq2, gk2, gv2;
    run_poisoned(gq1, gk1, gv1);
    run_poisoned(gq2, gk2, gv2);
    // The unordered dQ mode may round dQ differently from run to run; dK and
    // dV are still formed without atomics.
    bool det = (atomic || std::memcmp(gq1.data(), gq2.data(), nq * 2) == 0) &&
               std::memcmp(gk1.data(), gk2.data(), nkv * 2) == 0 &&
               std::memcmp(gv1.data(), gv2.data(), nkv * 2) == 0;
    if (fused && !atomic) {  // a third run (the dQ semaphores order the additions)
      run_poisoned(gq2, gk2, gv2);
      det = det && std::memcmp(gq1.data(), gq2.data(), nq * 2) == 0 &&
            std::memcmp(gk1.data(), gk2.data(), nkv * 2) == 0 &&
            std::memcmp(gv1.data(), gv2.data(), nkv * 2) == 0;
    }
    bool case_ok = det;
    Err eq, ek, ev;
    if (c.check) {
      float *rdq, *rdk, *rdv, *rdelta;
      CHECK_CUDA(cudaMalloc(&rdq, nq * 4));
      CHECK_CUDA(cudaMalloc(&rdk, nkv * 4));
      CHECK_CUDA(cudaMalloc(&rdv, nkv * 4));
      CHECK_CUDA(cudaMalloc(&rdelta, nl * 4));
      const int threads = 256;
      const int bq = static_cast<int>((static_cast<int64_t>(nl) * 32 + threads - 1) / threads);
      const int bk = static_cast<int>((static_cast<int64_t>(c.B) * c.Hk * c.S * 32 + threads - 1) / threads);
      const float sc = fa.mask_params.scale;
      if (f16) {
        RefDq<__half><<<bq, threads, 0, stream>>>((const __half*)q, (const __half*)k, (const __half*)v,
                                                  (const __half*)o, (const __half*)dout, lse, rdelta, rdq,
                                                  c.B, c.S, c.S, c.H, c.Hk, c.D, sc, c.causal);
        RefDkDv<__half><<<bk, threads, 0, stream>>>((const __half*)q, (const __half*)k, (const __half*)v,
                                                    (const __half*)dout, lse, rdelta, rdk, rdv, c.B, c.S, c.S,
                                                    c.H, c.Hk, c.D, sc, c.causal);
      } else {
        using T = __nv_bfloat16;
        RefDq<T><<<bq, threads, 0, stream>>>((const T*)q, (const T*)k, (const T*)v, (const T*)o,
                                             (const T*)dout, lse, rdelta, rdq, c.B, c.S, c.S, c.H, c.Hk, c.D,
                                             sc, c.causal);
        RefDkDv<T><<<bk, threads, 0, stream>>>((const T*)q, (const T*)k, (const T*)v, (const T*)dout, lse,
                                               rdelta, rdk, rdv, c.B, c.S, c.S, c.H, c.Hk, c.D, sc, c.causal);
      }
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaStreamSynchronize(stream));
      std::vector<float> hrq(nq), hrk(nkv), hrv(nkv);
      CHECK_CUDA(cudaMemcpy(hrq.data(), rdq, nq * 4, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(hrk.data(), rdk, nkv * 4, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(hrv.data(), rdv, nkv * 4, cudaMemcpyDeviceToHost));
      eq = Compare(gq1, hrq, f16);
      ek = Compare(gk1, hrk, f16);
      ev = Compare(gv1, hrv, f16);
      // Every other variant (bits 1, 8, 16, 32) against the same reference.
      // Fused mode: the fused variants 0-7 instead (bit 1 only at head dim 128),
      // and at head dim 64 the 128-query-step variants 8 and 12 (workspace
      // poisoned too: the ordered mode must not rely on a zeroed accumulator;
      // ordered: a second run compared bytewise).
      // 80-query steps at head dim 128 (bit 128; 165 = 128 | 37 runs as 132);
      // causal: bit 16 from each key block's diagonal (181 runs as 148).
      std::vector<int> check_vars;
      for (int var = 0; var < 64; ++var) check_vars.push_back(var);
      for (int var : {128, 132, 165, 144, 148, 181}) check_vars.push_back(var);
      for (int var : check_vars) {
        if (!fused && var >= 64) continue;
        if (var > 128 && (var & 16) != 0 && !c.causal) continue;  // bit 16: causal only
        const bool wide = fused && c.D == 64 && (var == 8 || var == 12);
        // Workspace and dQ poisoned (the delta pass zeroes the rows the convert
        // kernel reads; rows past q_len take the padding rows' zero adds).
        const bool q80 = fused && c.D == 128 && var >= 128;
        // The rotated dQ swizzle (bit 32) on the defaults: 37 / 32 at d128, 44 at d64
        // (workspace poisoned: the delta pass must zero the accumulator rows it reads).
        const bool rot = fused && (c.D == 128 ? (var == 37 || var == 32) : (c.D == 64 && var == 44));
        if (fused ? ((var > 7 && !wide && !rot && !q80) || (c.D != 128 && (var & 1) != 0)) : (var & 6) != 0)
          continue;
        if (c.D == 256 && (var & ~8) != 0) continue;  // d256 has bit 8 only
        std::vector<uint16_t> vq(nq), vk(nkv), vv(nkv);
        auto run_var = [&] {
          CHECK_CUDA(cudaMemsetAsync(dq, 0xFF, nq * 2, stream));
          CHECK_CUDA(cudaMemsetAsync(dk, 0xFF, nkv * 2, stream));
          CHECK_CUDA(cudaMemsetAsync(dv, 0xFF, nkv * 2, stream));
          if (wide || rot || q80) CHECK_CUDA(cudaMemsetAsync(ws, 0xFF, ws_elems * 4, stream));
          CHECK_CUDA(fused ? jaxdnn::attention::LaunchAttentionBwdSm90FusedVariant(a, stream, var)
                           : jaxdnn::attention::LaunchAttentionBwdSm90Variant(a, stream, var));
          CHECK_CUDA(cudaStreamSynchronize(stream));
          CHECK_CUDA(cudaMemcpy(vq.data(), dq, nq * 2, cudaMemcpyDeviceToHost));
          CHECK_CUDA(cudaMemcpy(vk.data(), dk, nkv * 2, cudaMemcpyDeviceToHost));
          CHECK_CUDA(cudaMemcpy(vv.data(), dv, nkv * 2, cudaMemcpyDeviceToHost));
        };
        run_var();
        const Err xq = Compare(vq, hrq, f16), xk = Compare(vk, hrk, f16), xv = Compare(vv, hrv, f16);
        bool bad = false;
        for (const Err* e : {&xq, &xk, &xv}) {
          if (!(e->rel_l2 <= 2e-2) || e->nonfinite > 0) bad = true;
        }
        if (bad) {
          std::printf("  variant %d: relL2 dq %.3g dk %.3g dv %.3g, non-finite %lld/%lld/%lld FAIL\n", var,
                      xq.rel_l2, xk.rel_l2, xv.rel_l2, xq.nonfinite, xk.nonfinite, xv.nonfinite);
          case_ok = false;
        }
        if (wide || rot || q80) {
          // dK, dV bit-identical across runs in both modes, dQ in the ordered one.
          const std::vector<uint16_t> pq = vq, pk = vk, pv = vv;
          run_var();
          const bool same = (atomic || pq == vq) && pk == vk && pv == vv;
          if (!same) {
            std::printf("  variant %d: rerun differs bytewise FAIL\n", var);
            case_ok = false;
          }
        }
      }
      CHECK_CUDA(cudaFree(rdq));
      CHECK_CUDA(cudaFree(rdk));
      CHECK_CUDA(cudaFree(rdv));
      CHECK_CUDA(cudaFree(rdelta));
      for (const Err* e : {&eq, &ek, &ev}) {
        if (!(e->rel_l2 <= 2e-2) || e->nonfinite > 0) case_ok = false;
      }
    } else {
      eq.nonfinite = CountNonFinite(gq1, f16);
      ek.nonfinite = CountNonFinite(gk1, f16);
      ev.nonfinite = CountNonFinite(gv1, f16);
      if (eq.nonfinite + ek.nonfinite + ev.nonfinite > 0) case_ok = false;
    }

    // Timing: median of 10 after 3 warm-ups, per variant.
    auto time_variant = [&](int variant) {
      for (int i = 0; i < 3; ++i)
        CHECK_CUDA(jaxdnn::attention::LaunchAttentionBwdSm90Variant(a, stream, variant));
      std::vector<float> ms(10);
      for (int i = 0; i < 10; ++i) {
        CHECK_CUDA(cudaEventRecord(e0, stream));
        CHECK_CUDA(jaxdnn::attention::LaunchAttentionBwdSm90Variant(a, stream, variant));
        CHECK_CUDA(cudaEventRecord(e1, stream));
        CHECK_CUDA(cudaEventSynchronize(e1));
        CHECK_CUDA(cudaEventElapsedTime(&ms[i], e0, e1));
      }
      std::sort(ms.begin(), ms.end());
      return 0.5 * (ms[4] + ms[5]);
    };
    auto time_fused = [&](int variant) {
      for (int i = 0; i < 3; ++i)
        CHECK_CUDA(jaxdnn::attention::LaunchAttentionBwdSm90FusedVariant(a, stream, variant));
      std::vector<float> ms(10);
      for (int i = 0; i < 10; ++i) {
        CHECK_CUDA(cudaEventRecord(e0, stream));
        CHECK_CUDA(jaxdnn::attention::LaunchAttentionBwdSm90FusedVariant(a, stream, variant));
        CHECK_CUDA(cudaEventRecord(e1, stream));
        CHECK_CUDA(cudaEventSynchronize(e1));
        CHECK_CUDA(cudaEventElapsedTime(&ms[i], e0, e1));
      }
      std::sort(ms.begin(), ms.end());
      return 0.5 * (ms[4] + ms[5]);
    };
    const double med = fused ? time_fused(-1) : time_variant(-1);
    double flops = 2.5 * 4.0 * c.B * c.H * static_cast<double>(c.S) * c.S * c.D;
    if (c.causal) flops *= 0.5;
    const double tflops = flops / (med * 1e-3) / 1e12;
    std::string breakdown;
    if (atomic) {
      // Unordered dQ next to the ordered fused kernel and the two-kernel one.
      char buf[200];
      const double t2 = time_variant(-1);
      a.deterministic = true;
      const double t_ordered = time_fused(-1);
      a.deterministic = false;
      std::snprintf(buf, sizeof(buf),
                    "\n    two-kernel %.3fms %.0fTF | fused ordered %.3fms %.0fTF | unordered x%.2f vs "
                    "two-kernel, x%.2f vs ordered",
                    t2, flops / (t2 * 1e-3) / 1e12, t_ordered, flops / (t_ordered * 1e-3) / 1e12, t2 / med,
                    t_ordered / med);
      breakdown += buf;
      // The step-order variants of the unordered kernel (bits: 1 = 3 stages
      // and 1 dQ buffer, 2 = dQ before dK's second half, 4 = TMA before
      // lse/delta, 8 = 128-query steps at head dim 64, 128 = 80-query steps at
      // head dim 128: 165 = 128 | 37 runs as 132; causal also 181 = 165 | 16,
      // the steps from each key block's diagonal), each against variant 0
      // timed in the same place.
      const double t0 = time_fused(0);
      breakdown += "\n    unordered variants vs v0:";
      for (int var : {5, 37, 165, 181, 32, 12, 44, 2, 4, 6, 1, 3, 7, 8}) {
        if (c.D != 128 && (var & 1) != 0) continue;
        if (c.D != 64 && (var & 8) != 0) continue;
        if (var == 181 && !c.causal) continue;  // = 165 when not causal
        const double t = time_fused(var);
        std::snprintf(buf, sizeof(buf), " v%d %.0fTF (x%.3f)", var, flops / (t * 1e-3) / 1e12, t0 / t);
        breakdown += buf;
      }
    } else if (fused) {
      // The fused variants next to the two-kernel backward (default variant).
      char buf[160];
      const double t2 = time_variant(-1);
      std::snprintf(buf, sizeof(buf), "\n    two-kernel %.3fms %.0fTF | fused", t2,
                    flops / (t2 * 1e-3) / 1e12);
      breakdown += buf;
      for (int var : {0, 1, 2, 4, 6, 8, 12}) {
        if (var == 1 && c.D != 128) continue;
        if ((var & 8) != 0 && c.D != 64) continue;
        const double t = time_fused(var);
        std::snprintf(buf, sizeof(buf), " v%d %.3fms %.0fTF (x%.2f)", var, t, flops / (t * 1e-3) / 1e12,
                      t2 / t);
        breakdown += buf;
      }
    } else if (!c.check && c.D == 256) {
      // Per kernel (each with the delta pre-pass), by block order (bit 8).
      char buf[96];
      for (int var : {0, 8}) {
        const double tk = time_variant(var | 4), tq = time_variant(var | 2), tt = time_variant(var);
        std::snprintf(buf, sizeof(buf),
                      "\n    v%d: dkdv %.3fms %.0fTF, dq %.3fms %.0fTF, total %.3fms %.0fTF", var, tk,
                      flops * 0.8 / (tk * 1e-3) / 1e12, tq, flops * 0.6 / (tq * 1e-3) / 1e12, tt,
                      flops / (tt * 1e-3) / 1e12);
        breakdown += buf;
      }
    } else if (!c.check) {
      // Per-kernel timings (each with the delta pre-pass), actual TFLOP/s of
      // the kernel's own gemms: dK/dV 4 of 7 gemms (0.8 x nominal flops), dQ 3 of 7 (0.6 x).
      char buf[96];
      breakdown += "\n    dkdv:";
      for (int var : {0, 8, 16, 24}) {
        const double t = time_variant(var | 4);
        std::snprintf(buf, sizeof(buf), " v%d %.3fms %.0fTF", var, t, flops * 0.8 / (t * 1e-3) / 1e12);
        breakdown += buf;
      }
      breakdown += "\n    dq:  ";
      for (int var : {0, 1, 8, 9, 32, 33, 40, 41}) {
        const double t = time_variant(var | 2);
        std::snprintf(buf, sizeof(buf), " v%d %.3fms %.0fTF", var, t, flops * 0.6 / (t * 1e-3) / 1e12);
        breakdown += buf;
      }
      breakdown += "\n    total:";
      for (int var : {8 | 1, 8 | 16 | 32, 8 | 32, 16 | 32 | 1 | 8}) {
        const double t = time_variant(var);
        std::snprintf(buf, sizeof(buf), " v%d %.3fms %.0fTF", var, t, flops / (t * 1e-3) / 1e12);
        breakdown += buf;
      }
    }
    const long long nonfin = eq.nonfinite + ek.nonfinite + ev.nonfinite;
    if (c.check) {
      std::printf("%-30s %-4s %10.3g %10.3g %10.3g %10.3g %10.3g %10.3g %5s %9.3f %8.1f %s", name,
                  f16 ? "f16" : "bf16", eq.max_abs, eq.rel_l2, ek.max_abs, ek.rel_l2, ev.max_abs, ev.rel_l2,
                  det ? "yes" : "NO", med, tflops, case_ok ? "ok" : "FAIL");
    } else {
      std::printf("%-30s %-4s %10s %10s %10s %10s %10s %10s %5s %9.3f %8.1f %s", name, f16 ? "f16" : "bf16",
                  "-", "-", "-", "-", "-", "-", det ? "yes" : "NO", med, tflops,
                  case_ok ? "ok (finite+det)" : "FAIL");
    }
    if (nonfin)
      std::printf(" (non-finite: dq %lld dk %lld dv %lld)", eq.nonfinite, ek.nonfinite, ev.nonfinite);
    std::printf("%s\n", breakdown.c_str());
    std::fflush(stdout);
    all_ok = all_ok && case_ok;
    for (void* ptr : {q, k, v, o, dout, dq, dk, dv}) CHECK_CUDA(cudaFree(ptr));
    CHECK_CUDA(cudaFree(lse));
    CHECK_CUDA(cudaFree(ws));
  }
  if (mode == "fusedcheck" || mode == "atomiccheck") {
    all_ok = sm90_bwd_ext::RunSegCases(stream, !atomic, atomic, false) && all_ok;
  }
  std::printf("%s\n", all_ok ? "ALL PASSED" : "SOME FAILED");
  return all_ok ? 0 : 1;
}
