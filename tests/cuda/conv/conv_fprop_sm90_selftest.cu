// Standalone self-test and benchmark of the CUTLASS sm90 forward convolution
// (cpp/conv/sm90/conv_fprop_sm90.cu). Build from the repository root, with
// CUTLASS_INCLUDE the nvidia-cutlass wheel's cutlass_library/source/include
// (tests/cuda/conv/build_and_run.sh does this and runs both modes):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -Icpp -I$CUTLASS_INCLUDE -I$CUTLASS_INCLUDE/../tools/util/include \
//     -I$(python3 -c "import jax; print(jax.ffi.include_dir())") -DNDEBUG \
//     tests/cuda/conv/conv_fprop_sm90_selftest.cu cpp/conv/sm90/conv_fprop_sm90.cu \
//     cpp/conv/sm90/conv_fprop_sm90_n64.cu cpp/conv/sm90/conv_fprop_sm90_n128.cu \
//     cpp/conv/sm90/conv_sm90_aux.cu cpp/common/switches.cc -o conv_fprop_sm90_selftest
// Modes: no argument checks every case against a naive fp32 reference kernel
// (one thread per output, problem.h's formulas) on fixed-seed inputs and
// prints one line per case, "ALL PASSED" and exit 0 when all pass; "bench"
// times the 56x56x64 3x3 conv at batch 128 (20 warm-ups, 100 timed calls of
// the whole launcher, weight transpose included) and prints TFLOP/s.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/activation.h"
#include "common/launch_status.h"
#include "conv/problem.h"
#include "conv/sm90/conv_fprop_sm90.h"

#include "../common/selftest_util.cuh"

namespace {

using sm90_selftest::HostFromF;
using sm90_selftest::HostToF;
using sm90_selftest::NextUniform;
using sm90_selftest::ToF;

using jaxdnn::Act;
using jaxdnn::conv::ConvFwdArgs;
using jaxdnn::ffi::DataType;

struct RefGeo {
  int n, cin, cout;
  int in[3], out[3], win[3], stride[3], kdil[3], indil[3], lo[3];
};

// One thread per output (n, o, co) in fp32, with cpp/conv/problem.h's index
// map (input dilation included) and epilogue.
template <class T>
__global__ void RefFpropKernel(const T* x, const T* w, const float* bias, const T* res, float* out, RefGeo g,
                               float alpha, float beta, int act) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = int64_t(g.n) * g.out[0] * g.out[1] * g.out[2] * g.cout;
  if (idx >= total) return;
  const int co = int(idx % g.cout);
  int64_t r = idx / g.cout;
  int o[3];
  for (int k = 2; k >= 0; --k) {
    o[k] = int(r % g.out[k]);
    r /= g.out[k];
  }
  const int n = int(r);
  float acc = 0.0f;
  for (int j0 = 0; j0 < g.win[0]; ++j0) {
    for (int j1 = 0; j1 < g.win[1]; ++j1) {
      for (int j2 = 0; j2 < g.win[2]; ++j2) {
        const int j[3] = {j0, j1, j2};
        int i[3];
        bool inside = true;
        for (int k = 0; k < 3; ++k) {
          const int p = o[k] * g.stride[k] - g.lo[k] + j[k] * g.kdil[k];
          i[k] = p / g.indil[k];
          inside = inside && p >= 0 && p % g.indil[k] == 0 && i[k] < g.in[k];
        }
        if (!inside) continue;
        const int64_t tap = (int64_t(j0) * g.win[1] + j1) * g.win[2] + j2;
        const T* xp = x + (((int64_t(n) * g.in[0] + i[0]) * g.in[1] + i[1]) * g.in[2] + i[2]) * g.cin;
        const T* wp = w + tap * g.cin * g.cout + co;
        for (int ci = 0; ci < g.cin; ++ci) acc += ToF(xp[ci]) * ToF(wp[int64_t(ci) * g.cout]);
      }
    }
  }
  float z =
      alpha * acc + (bias != nullptr ? bias[co] : 0.0f) + (res != nullptr ? beta * ToF(res[idx]) : 0.0f);
  if (act == int(Act::kRelu)) z = jaxdnn::Apply<Act::kRelu>(z, 0.0f);
  if (act == int(Act::kRelu6)) z = jaxdnn::Apply<Act::kRelu6>(z, 0.0f);
  out[idx] = z;
}

struct Spec {
  const char* name;
  bool f16 = false;
  int64_t batch = 1, cin = 8, cout = 8, groups = 1;
  std::array<int64_t, 3> in{1, 1, 1}, window{1, 1, 1}, stride{1, 1, 1}, kdil{1, 1, 1}, indil{1, 1, 1};
  std::array<int64_t, 3> lo{0, 0, 0}, hi{0, 0, 0};
  int act = 0;
  bool bias = false;
  DataType bias_dtype = DataType::F32;
  bool residual = false;
  float alpha = 1.0f, beta = 1.0f;
  bool expect_refusal = false;
};

ConvFwdArgs MakeArgs(const Spec& s) {
  ConvFwdArgs p;
  auto& g = p.g;
  g.batch = s.batch;
  g.in_channels = s.cin;
  g.out_channels = s.cout;
  g.groups = s.groups;
  for (int k = 0; k < 3; ++k) {
    g.in[k] = s.in[k];
    g.window[k] = s.window[k];
    g.stride[k] = s.stride[k];
    g.k_dilation[k] = s.kdil[k];
    g.in_dilation[k] = s.indil[k];
    g.pad_lo[k] = s.lo[k];
    const int64_t span =
        (s.in[k] - 1) * s.indil[k] + 1 + s.lo[k] + s.hi[k] - ((s.window[k] - 1) * s.kdil[k] + 1);
    g.out[k] = span < 0 ? 0 : span / s.stride[k] + 1;
  }
  p.e.act = s.act;
  p.e.alpha = s.alpha;
  p.e.beta = s.beta;
  p.e.has_bias = s.bias;
  p.e.has_residual = s.residual;
  p.e.saved = s.act == 0 ? jaxdnn::conv::kSaveNothing : jaxdnn::conv::kSaveOutput;
  p.dtype = p.out_dtype = s.f16 ? DataType::F16 : DataType::BF16;
  if (s.bias) p.bias_dtype = s.bias_dtype;
  if (s.residual) p.residual_dtype = p.dtype;
  return p;
}

// Device buffers of one case, filled from the fixed-seed RNG.
struct Buffers {
  void *x = nullptr, *w = nullptr, *bias = nullptr, *res = nullptr, *y = nullptr, *ws = nullptr;
  float *bias_f = nullptr, *ref = nullptr;
  size_t ws_bytes = 0;
  int64_t y_count = 0;

  Buffers(const Spec& s, ConvFwdArgs* p, uint64_t seed) {
    sm90_selftest::g_rng = seed;
    const auto& g = p->g;
    const int64_t x_count = g.batch * g.in_positions() * g.in_channels;
    const int64_t w_count = g.taps() * (g.in_channels / std::max<int64_t>(g.groups, 1)) * g.out_channels;
    y_count = g.batch * g.out_positions() * g.out_channels;
    std::vector<uint16_t> hx(x_count), hw(w_count), hres(s.residual ? y_count : 0);
    for (auto& v : hx) v = HostFromF(NextUniform(), s.f16);
    // Weights ~ 1/sqrt(fan-in), so outputs stay near unit scale.
    const float wscale = 1.0f / std::sqrt(float(std::max<int64_t>(1, g.taps() * g.in_channels)));
    for (auto& v : hw) v = HostFromF(NextUniform() * wscale, s.f16);
    for (auto& v : hres) v = HostFromF(NextUniform(), s.f16);
    x = Upload(hx.data(), hx.size() * 2);
    w = Upload(hw.data(), hw.size() * 2);
    if (s.residual) res = Upload(hres.data(), hres.size() * 2);
    if (s.bias) {
      // The reference reads the same values the launcher gets in its dtype.
      std::vector<float> hb(g.out_channels);
      std::vector<uint8_t> typed(g.out_channels * 8);
      for (int64_t c = 0; c < g.out_channels; ++c) {
        const float v = NextUniform() * 0.5f;
        switch (s.bias_dtype) {
          case DataType::BF16:
          case DataType::F16: {
            const uint16_t b = HostFromF(v, s.bias_dtype == DataType::F16);
            std::memcpy(&typed[c * 2], &b, 2);
            hb[c] = HostToF(b, s.bias_dtype == DataType::F16);
            break;
          }
          case DataType::F64: {
            const double d = v;
            std::memcpy(&typed[c * 8], &d, 8);
            hb[c] = v;
            break;
          }
          default: std::memcpy(&typed[c * 4], &v, 4); hb[c] = v;
        }
      }
      bias = Upload(typed.data(), typed.size());
      bias_f = static_cast<float*>(Upload(hb.data(), hb.size() * 4));
    }
    CHECK_CUDA(cudaMalloc(&y, std::max<int64_t>(y_count, 1) * 2));
    CHECK_CUDA(cudaMalloc(&ref, std::max<int64_t>(y_count, 1) * 4));
    ws_bytes = jaxdnn::conv::ConvFpropSm90Workspace(*p);
    CHECK_CUDA(cudaMalloc(&ws, std::max<size_t>(ws_bytes, 1)));
    p->x = x;
    p->w = w;
    p->bias = bias;
    p->residual = res;
    p->y = y;
  }
  ~Buffers() {
    for (void* b : {x, w, bias, res, y, ws, static_cast<void*>(bias_f), static_cast<void*>(ref)}) cudaFree(b);
  }
  static void* Upload(const void* h, size_t bytes) {
    void* d = nullptr;
    CHECK_CUDA(cudaMalloc(&d, std::max<size_t>(bytes, 1)));
    CHECK_CUDA(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
  }
};

void RunReference(const Spec& s, const ConvFwdArgs& p, const Buffers& b) {
  RefGeo rg;
  rg.n = int(p.g.batch);
  rg.cin = int(p.g.in_channels);
  rg.cout = int(p.g.out_channels);
  for (int k = 0; k < 3; ++k) {
    rg.in[k] = int(p.g.in[k]);
    rg.out[k] = int(p.g.out[k]);
    rg.win[k] = int(p.g.window[k]);
    rg.stride[k] = int(p.g.stride[k]);
    rg.kdil[k] = int(p.g.k_dilation[k]);
    rg.indil[k] = int(p.g.in_dilation[k]);
    rg.lo[k] = int(p.g.pad_lo[k]);
  }
  const int threads = 256;
  const unsigned blocks = unsigned((b.y_count + threads - 1) / threads);
  if (s.f16) {
    RefFpropKernel<__half>
        <<<blocks, threads>>>(static_cast<const __half*>(b.x), static_cast<const __half*>(b.w), b.bias_f,
                              static_cast<const __half*>(b.res), b.ref, rg, s.alpha, s.beta, s.act);
  } else {
    RefFpropKernel<__nv_bfloat16><<<blocks, threads>>>(
        static_cast<const __nv_bfloat16*>(b.x), static_cast<const __nv_bfloat16*>(b.w), b.bias_f,
        static_cast<const __nv_bfloat16*>(b.res), b.ref, rg, s.alpha, s.beta, s.act);
  }
  CHECK_CUDA(cudaGetLastError());
}

bool CheckCase(const Spec& s, uint64_t seed) {
  ConvFwdArgs p = MakeArgs(s);
  Buffers b(s, &p, seed);
  CHECK_CUDA(cudaMemset(b.y, 0xFF, std::max<int64_t>(b.y_count, 1) * 2));  // NaN where nothing is written
  const jaxdnn::LaunchStatus st = jaxdnn::conv::ConvFpropSm90(p, b.ws, b.ws_bytes, nullptr);
  if (s.expect_refusal) {
    const bool ok = !st.ok();
    std::printf("%-44s %s  %s\n", s.name, ok ? ("refused: " + st.Text()).c_str() : "ran, should refuse",
                ok ? "PASS" : "FAIL");
    return ok;
  }
  if (!st.ok()) {
    std::printf("%-44s launcher failed: %s  FAIL\n", s.name, st.Text().c_str());
    CHECK_CUDA(cudaDeviceSynchronize());
    return false;
  }
  RunReference(s, p, b);
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("%-44s CUDA error %s  FAIL\n", s.name, cudaGetErrorString(err));
    std::exit(2);  // the context is gone
  }
  std::vector<uint16_t> hy(b.y_count);
  std::vector<float> href(b.y_count);
  CHECK_CUDA(cudaMemcpy(hy.data(), b.y, hy.size() * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(href.data(), b.ref, href.size() * 4, cudaMemcpyDeviceToHost));
  double max_err = 0.0, max_ref = 0.0;
  int64_t bad = 0, worst = 0;  // bad: non-finite outputs (the 0xFF poison is NaN)
  for (int64_t i = 0; i < b.y_count; ++i) {
    const double got = HostToF(hy[i], s.f16), want = href[i];
    max_ref = std::max(max_ref, std::fabs(want));
    if (!std::isfinite(got)) {
      if (bad++ == 0) worst = i;
      continue;
    }
    if (std::fabs(got - want) > max_err && bad == 0) {
      max_err = std::fabs(got - want);
      worst = i;
    }
  }
  const double tol = 1e-2 * std::max(max_ref, 1e-3);
  const bool pass = bad == 0 && max_err <= tol;
  std::printf("%-44s %s M=%lld N=%lld K=%lld  max_err=%.3e (tol %.3e, max|ref| %.3f)%s  %s\n", s.name,
              s.f16 ? "f16 " : "bf16", (long long)(p.g.batch * p.g.out_positions()),
              (long long)p.g.out_channels, (long long)(p.g.taps() * p.g.in_channels), max_err, tol, max_ref,
              bad ? (" " + std::to_string(bad) + " NaN").c_str() : "", pass ? "PASS" : "FAIL");
  if (!pass) {
    std::printf("    worst at %lld: got %g, want %g\n", (long long)worst, HostToF(hy[worst], s.f16),
                href[worst]);
  }
  return pass;
}

std::vector<Spec> CheckSpecs() {
  std::vector<Spec> v;
  auto conv2d = [](const char* name, int64_t n, int64_t h, int64_t w, int64_t cin, int64_t cout, int64_t k,
                   int64_t stride, int64_t lo, int64_t hi) {
    Spec s;
    s.name = name;
    s.batch = n;
    s.cin = cin;
    s.cout = cout;
    s.in = {1, h, w};
    s.window = {1, k, k};
    s.stride = {1, stride, stride};
    s.lo = {0, lo, lo};
    s.hi = {0, hi, hi};
    return s;
  };
  // ResNet's 3x3 SAME conv, plain and with every epilogue piece.
  Spec s = conv2d("2d 3x3 s1 SAME 56x56 64->64 n2", 2, 56, 56, 64, 64, 3, 1, 1, 1);
  v.push_back(s);
  s.name = "  + bias(f32) + relu";
  s.bias = true;
  s.act = int(Act::kRelu);
  v.push_back(s);
  s.name = "  + bias(bf16) + residual, alpha .5 beta 2";
  s.bias_dtype = DataType::BF16;
  s.residual = true;
  s.alpha = 0.5f;
  s.beta = 2.0f;
  s.act = int(Act::kIdentity);
  v.push_back(s);
  s.name = "  + bias + residual + relu (f16)";
  s.f16 = true;
  s.bias_dtype = DataType::F16;
  s.act = int(Act::kRelu);
  v.push_back(s);
  s.name = "  + bias + residual + relu6";
  s.f16 = false;
  s.act = int(Act::kRelu6);
  v.push_back(s);
  // 1x1 stride 2 projection: lax's high padding is -1 here (clamped to 0).
  s = conv2d("2d 1x1 s2 28x28 256->128 n2", 2, 28, 28, 256, 128, 1, 2, 0, -1);
  v.push_back(s);
  s.name = "  + bias + residual + relu";
  s.bias = true;
  s.residual = true;
  s.act = int(Act::kRelu);
  v.push_back(s);
  s = conv2d("2d 1x1 s2 15x15 256->128 (odd)", 2, 15, 15, 256, 128, 1, 2, 0, 0);
  v.push_back(s);
  // The stem with the smallest aligned C_in.
  s = conv2d("2d 7x7 s2 p3 64x64 8->64 n2 + bias + relu", 2, 64, 64, 8, 64, 7, 2, 3, 3);
  s.bias = true;
  s.act = int(Act::kRelu);
  v.push_back(s);
  s.name = "  (f16)";
  s.f16 = true;
  v.push_back(s);
  // Partial channel block (24 < 64) and partial C_out tile (72), TF-style
  // asymmetric SAME with stride 2, odd sizes, H != W.
  s = conv2d("2d 3x3 s2 pad 0/1 17x20 24->72 n3 + residual", 3, 17, 20, 24, 72, 3, 2, 0, 1);
  s.residual = true;
  s.beta = -1.0f;
  v.push_back(s);
  // Several channel blocks plus a remainder (C_in 136 = 2 * 64 + 8) and
  // C_out over one tile (200).
  s = conv2d("2d 3x3 s1 VALID 12x12 136->200 n2 + bias(f64)", 2, 12, 12, 136, 200, 3, 1, 0, 0);
  s.bias = true;
  s.bias_dtype = DataType::F64;
  v.push_back(s);
  // 3-D.
  s = Spec();
  s.name = "3d 3x3x3 s1 SAME 6x10x12 16->32 n2 + bias + relu";
  s.batch = 2;
  s.cin = 16;
  s.cout = 32;
  s.in = {6, 10, 12};
  s.window = {3, 3, 3};
  s.lo = s.hi = {1, 1, 1};
  s.bias = true;
  s.act = int(Act::kRelu);
  v.push_back(s);
  s.name = "  (f16)";
  s.f16 = true;
  v.push_back(s);
  s = Spec();
  s.name = "3d 3x3x3 s2 dil(1,2,1) 9x14x11 32->64 + residual";
  s.cin = 32;
  s.cout = 64;
  s.in = {9, 14, 11};
  s.window = {3, 3, 3};
  s.stride = {2, 2, 2};
  s.kdil = {1, 2, 1};
  s.lo = {1, 2, 0};
  s.hi = {1, 2, 0};
  s.residual = true;
  s.alpha = 0.5f;
  s.beta = 2.0f;
  v.push_back(s);
  // 1-D (W only) with kernel dilation 2.
  s = Spec();
  s.name = "1d k5 dil2 SAME w=100 32->48 n3 + res, a.5 b2";
  s.batch = 3;
  s.cin = 32;
  s.cout = 48;
  s.in = {1, 1, 100};
  s.window = {1, 1, 5};
  s.kdil = {1, 1, 2};
  s.lo = s.hi = {0, 0, 4};
  s.residual = true;
  s.alpha = 0.5f;
  s.beta = 2.0f;
  v.push_back(s);
  s.name = "1d k3 s3 VALID w=301 64->64 n1 + relu";
  s.batch = 1;
  s.cin = s.cout = 64;
  s.in = {1, 1, 301};
  s.window = {1, 1, 3};
  s.stride = {1, 1, 3};
  s.kdil = {1, 1, 1};
  s.lo = s.hi = {0, 0, 0};
  s.residual = false;
  s.alpha = 1.0f;
  s.act = int(Act::kRelu);
  v.push_back(s);
  // What the launcher must refuse.
  s = conv2d("refuse: C_in 4", 1, 8, 8, 4, 64, 3, 1, 1, 1);
  s.expect_refusal = true;
  v.push_back(s);
  s = conv2d("refuse: C_out 12", 1, 8, 8, 16, 12, 3, 1, 1, 1);
  s.expect_refusal = true;
  v.push_back(s);
  s = conv2d("refuse: groups 2", 1, 8, 8, 16, 16, 3, 1, 1, 1);
  s.groups = 2;
  s.expect_refusal = true;
  v.push_back(s);
  s = conv2d("refuse: input dilation 2", 1, 8, 8, 16, 16, 3, 1, 1, 1);
  s.indil = {1, 2, 2};
  s.expect_refusal = true;
  v.push_back(s);
  s = conv2d("refuse: gelu", 1, 8, 8, 16, 16, 3, 1, 1, 1);
  s.act = int(Act::kGeluTanh);
  s.expect_refusal = true;
  v.push_back(s);
  s = conv2d("refuse: padding 20 (im2col TMA limit)", 1, 8, 8, 16, 16, 3, 1, 20, 20);
  s.expect_refusal = true;
  v.push_back(s);
  return v;
}

int Check() {
  bool all = true;
  uint64_t seed = 0x9E3779B97F4A7C15ull;
  for (const Spec& s : CheckSpecs()) all = CheckCase(s, seed += 0x1234567ull) && all;
  std::printf(all ? "ALL PASSED\n" : "SOME FAILED\n");
  return all ? 0 : 1;
}

int Bench() {
  Spec s;
  s.batch = 128;
  s.cin = s.cout = 64;
  s.in = {1, 56, 56};
  s.window = {1, 3, 3};
  s.lo = s.hi = {0, 1, 1};
  struct Variant {
    const char* name;
    bool f16, epilogue;
  };
  for (const Variant& var :
       {Variant{"bf16", false, false}, Variant{"bf16 + bias + residual + relu", false, true},
        Variant{"f16", true, false}}) {
    s.f16 = var.f16;
    s.bias = s.residual = var.epilogue;
    s.act = var.epilogue ? int(Act::kRelu) : 0;
    ConvFwdArgs p = MakeArgs(s);
    Buffers b(s, &p, 42);
    auto launch = [&] {
      const jaxdnn::LaunchStatus st = jaxdnn::conv::ConvFpropSm90(p, b.ws, b.ws_bytes, nullptr);
      if (!st.ok()) {
        std::fprintf(stderr, "launcher failed: %s\n", st.Text().c_str());
        std::exit(2);
      }
    };
    for (int i = 0; i < 20; ++i) launch();
    cudaEvent_t t0, t1;
    CHECK_CUDA(cudaEventCreate(&t0));
    CHECK_CUDA(cudaEventCreate(&t1));
    CHECK_CUDA(cudaEventRecord(t0));
    for (int i = 0; i < 100; ++i) launch();
    CHECK_CUDA(cudaEventRecord(t1));
    CHECK_CUDA(cudaEventSynchronize(t1));
    float ms = 0.0f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
    const double per = ms / 100.0;
    const double flop =
        2.0 * p.g.batch * p.g.out_positions() * p.g.out_channels * p.g.taps() * p.g.in_channels;
    std::printf("bench 3x3 s1 SAME 56x56 64->64 n128 %-32s %.4f ms  %.1f TFLOP/s\n", var.name, per,
                flop / (per * 1e-3) / 1e12);
    CHECK_CUDA(cudaEventDestroy(t0));
    CHECK_CUDA(cudaEventDestroy(t1));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  if (prop.major != 9) {
    std::printf("needs an sm_90 GPU\n");
    return 1;
  }
  if (argc > 1 && std::string(argv[1]) == "bench") return Bench();
  return Check();
}
