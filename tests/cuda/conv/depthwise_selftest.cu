// Self-test of the CUDA depthwise forward (cpp/conv/sm80/depthwise_fwd.cu)
// against a float64 host loop over problem.h's index rule: 1D/2D/3D, odd
// sizes, strides, padding, input and kernel dilation, every dtype pair, the
// epilogue (bias of another dtype, residual, alpha, beta, activations, z
// saved), and the refusals; bench: the issue's depthwise 3x3 56x56x256
// layers at batch 128 (dilation 1, 2, 4), bytes moved over time.
//   depthwise_selftest check | bench
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "../common/selftest_util.cuh"
#include "dw_selftest_util.cuh"
#include "conv/sm80/depthwise_fwd.h"

using namespace jaxdnn;
using namespace jaxdnn::conv;
using namespace dw_selftest;
using sm90_selftest::NextUniform;

namespace {

double ActHost(int act, double v, double param) {
  switch (act) {
    case 0: return v;
    case 1: return v > 0 ? v : 0;
    case 2: return std::min(std::max(v, 0.0), 6.0);
    case 3: return 0.5 * v * std::erfc(-v / std::sqrt(2.0));
    case 5: return v / (1 + std::exp(-v));
    case 7: return std::tanh(v);
    case 10: return v >= 0 ? v : param * v;
  }
  return v;
}

struct Case {
  const char* name;
  int64_t n, c;
  std::array<int64_t, 3> in, window, stride, in_dil, k_dil, pad_lo, pad_hi;
  ffi::DataType dtype, out_dtype, bias_dtype;
  bool residual;
  int act;
  float alpha, beta;
};

std::array<int64_t, 3> OutOf(const Case& c) {
  std::array<int64_t, 3> out{};
  for (int k = 0; k < 3; ++k) {
    const int64_t span = (c.in[k] - 1) * c.in_dil[k] + 1 + c.pad_lo[k] + c.pad_hi[k];
    const int64_t eff = (c.window[k] - 1) * c.k_dil[k] + 1;
    out[k] = span >= eff ? (span - eff) / c.stride[k] + 1 : 0;
  }
  return out;
}

const char* KernelName(DwKernel k) { return k == DwKernel::kDirect ? "direct" : "tiled"; }

bool RunCase(const Case& c, DwKernel kernel) {
  ConvFwdArgs p;
  p.g.batch = c.n;
  p.g.in_channels = p.g.out_channels = p.g.groups = c.c;
  p.g.algorithm = kAlgoDirect;
  p.g.in = c.in;
  p.g.out = OutOf(c);
  p.g.window = c.window;
  p.g.stride = c.stride;
  p.g.in_dilation = c.in_dil;
  p.g.k_dilation = c.k_dil;
  p.g.pad_lo = c.pad_lo;
  p.e.act = c.act;
  p.e.act_param = 0.1f;
  p.e.alpha = c.alpha;
  p.e.beta = c.beta;
  p.e.has_bias = c.bias_dtype != ffi::DataType::INVALID;
  p.e.has_residual = c.residual;
  p.e.saved =
      (c.act == 0 || c.act == 1 || c.act == 2) ? (c.act == 0 ? kSaveNothing : kSaveOutput) : kSavePreact;
  p.dtype = c.dtype;
  p.out_dtype = c.out_dtype;
  p.bias_dtype = c.bias_dtype;
  p.residual_dtype = c.residual ? c.out_dtype : ffi::DataType::INVALID;
  const int64_t xin = c.n * c.in[0] * c.in[1] * c.in[2] * c.c, taps = c.window[0] * c.window[1] * c.window[2];
  const int64_t outn = c.n * p.g.out_positions() * c.c;
  std::vector<float> x(xin), w(taps * c.c), b(c.c), r(outn);
  std::vector<uint8_t> xb(xin * Bytes(c.dtype)), wb(w.size() * Bytes(c.dtype)), bb(c.c * 4),
      rb(outn * Bytes(c.out_dtype));
  for (int64_t i = 0; i < xin; ++i) PutBits(xb, i, x[i] = Round(NextUniform(), c.dtype), c.dtype);
  for (size_t i = 0; i < w.size(); ++i) PutBits(wb, i, w[i] = Round(NextUniform() * 0.5f, c.dtype), c.dtype);
  if (p.e.has_bias)
    for (int64_t i = 0; i < c.c; ++i) PutBits(bb, i, b[i] = Round(NextUniform(), c.bias_dtype), c.bias_dtype);
  if (c.residual)
    for (int64_t i = 0; i < outn; ++i) PutBits(rb, i, r[i] = Round(NextUniform(), c.out_dtype), c.out_dtype);
  Buf dx(xb), dw(wb), dbias(bb), dres(rb), dy(outn * Bytes(c.out_dtype)), dz(outn * Bytes(c.out_dtype));
  p.x = dx.d;
  p.w = dw.d;
  p.bias = p.e.has_bias ? dbias.d : nullptr;
  p.residual = c.residual ? dres.d : nullptr;
  p.y = dy.d;
  p.z = dz.d;
  const char* refusal = DepthwiseFwdRefusal(p);
  if (refusal != nullptr) {
    std::printf("FAIL %-40s refused: %s\n", c.name, refusal);
    return false;
  }
  const LaunchStatus st = DepthwiseFwdCuda(p, 0, kernel);
  if (st.refused()) {
    std::printf("FAIL %-40s %-6s refused: %s\n", c.name, KernelName(kernel), st.Text().c_str());
    return false;
  }
  CHECK_CUDA(st);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<uint8_t> yb(outn * Bytes(c.out_dtype)), zb(outn * Bytes(c.out_dtype));
  CHECK_CUDA(cudaMemcpy(yb.data(), dy.d, yb.size(), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(zb.data(), dz.d, zb.size(), cudaMemcpyDeviceToHost));
  const double tol = c.out_dtype == ffi::DataType::F32 && c.dtype == ffi::DataType::F32 ? 2e-5 : 2e-2;
  double worst = 0;
  const auto& o = p.g.out;
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t od = 0; od < o[0]; ++od)
      for (int64_t oh = 0; oh < o[1]; ++oh)
        for (int64_t ow = 0; ow < o[2]; ++ow)
          for (int64_t ch = 0; ch < c.c; ++ch) {
            double acc = 0;
            const int64_t oo[3] = {od, oh, ow};
            for (int64_t kd = 0; kd < c.window[0]; ++kd)
              for (int64_t kh = 0; kh < c.window[1]; ++kh)
                for (int64_t kw = 0; kw < c.window[2]; ++kw) {
                  const int64_t kk[3] = {kd, kh, kw};
                  int64_t ii[3];
                  bool ok = true;
                  for (int k = 0; k < 3; ++k) {
                    const int64_t pp = oo[k] * c.stride[k] - c.pad_lo[k] + kk[k] * c.k_dil[k];
                    if (pp < 0 || pp % c.in_dil[k] != 0 || pp / c.in_dil[k] >= c.in[k]) ok = false;
                    ii[k] = ok ? pp / c.in_dil[k] : 0;
                  }
                  if (!ok) continue;
                  const int64_t xi = (((n * c.in[0] + ii[0]) * c.in[1] + ii[1]) * c.in[2] + ii[2]) * c.c + ch;
                  acc += double(x[xi]) * w[((kd * c.window[1] + kh) * c.window[2] + kw) * c.c + ch];
                }
            const int64_t yi = (((n * o[0] + od) * o[1] + oh) * o[2] + ow) * c.c + ch;
            double z = c.alpha * acc + (p.e.has_bias ? b[ch] : 0.0) + (c.residual ? c.beta * r[yi] : 0.0);
            const double want = ActHost(c.act, z, 0.1);
            const double got = GetBits(yb, yi, c.out_dtype);
            worst = std::max(worst, std::fabs(got - want) / (tol * (1 + std::fabs(want))));
            if (p.e.saved == kSavePreact)
              worst =
                  std::max(worst, std::fabs(GetBits(zb, yi, c.out_dtype) - z) / (tol * (1 + std::fabs(z))));
          }
  const bool ok = worst <= 1.0;
  std::printf("%s %-40s %-6s out %lldx%lldx%lld worst %.3g\n", ok ? "ok  " : "FAIL", c.name,
              KernelName(kernel), (long long)o[0], (long long)o[1], (long long)o[2], worst);
  return ok;
}

using DT = ffi::DataType;
constexpr DT F32 = DT::F32, BF = DT::BF16, F16 = DT::F16, NONE = DT::INVALID;

int Check() {
  // clang-format off
  const Case cases[] = {
      {"2d 3x3 same bf16", 2, 64, {1, 9, 11}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, BF, BF, NONE, false, 0, 1.0f, 0.0f},
      {"2d 3x3 s2 bias(f32) relu bf16", 3, 32, {1, 13, 13}, {1, 3, 3}, {1, 2, 2}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, BF, BF, F32, false, 1, 1.0f, 0.0f},
      {"2d 3x3 dil4 res gelu -> f32", 2, 16, {1, 17, 15}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 4, 4}, {0, 4, 4}, {0, 4, 4}, BF, F32, BF, true, 3, 0.5f, 2.0f},
      {"2d 5x5 asym pad silu f16", 1, 24, {1, 7, 7}, {1, 5, 5}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 1, 3}, {0, 2, 0}, F16, F16, F16, true, 5, 1.0f, 1.0f},
      {"2d 3x3 f32 leaky bias res", 2, 12, {1, 6, 5}, {1, 3, 3}, {1, 1, 2}, {1, 1, 1}, {1, 2, 1}, {0, 2, 1}, {0, 2, 1}, F32, F32, F32, true, 10, 1.5f, -1.0f},
      {"1d k7 s3 tanh bf16", 3, 40, {1, 1, 50}, {1, 1, 7}, {1, 1, 3}, {1, 1, 1}, {1, 1, 1}, {0, 0, 3}, {0, 0, 3}, BF, BF, BF, false, 7, 1.0f, 0.0f},
      {"3d 3x3x3 relu6 bf16", 2, 16, {5, 6, 7}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, BF, BF, F16, true, 2, 1.0f, 1.0f},
      {"2d transposed 4x4 s2 (in_dil 2) bf16", 2, 8, {1, 5, 6}, {1, 4, 4}, {1, 1, 1}, {1, 2, 2}, {1, 1, 1}, {0, 2, 2}, {0, 2, 2}, BF, BF, NONE, false, 0, 1.0f, 0.0f},
      {"2d window larger than input f32", 1, 4, {1, 2, 3}, {1, 5, 5}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 2, 2}, {0, 2, 2}, F32, F32, NONE, false, 0, 1.0f, 0.0f},
      {"2d 3x3 s1 56-wide tile edges, 72 ch bf16", 2, 72, {1, 23, 57}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, BF, BF, BF, true, 5, 1.0f, 1.0f},
      {"2d 3x3 dil3 s2 (phases) f16", 2, 16, {1, 19, 21}, {1, 3, 3}, {1, 2, 2}, {1, 1, 1}, {1, 3, 3}, {0, 3, 2}, {0, 3, 2}, F16, F16, NONE, false, 1, 1.0f, 0.0f},
      {"2d 5x3 dil (2,4) s (1,2) f32 -> relu6", 1, 8, {1, 20, 33}, {1, 5, 3}, {1, 1, 2}, {1, 1, 1}, {1, 2, 4}, {0, 4, 4}, {0, 4, 4}, F32, F32, F32, false, 2, 1.0f, 0.0f},
      {"2d 7x7 dil2 s3 128 ch bf16", 2, 128, {1, 30, 31}, {1, 7, 7}, {1, 3, 3}, {1, 1, 1}, {1, 2, 2}, {0, 6, 5}, {0, 6, 7}, BF, BF, NONE, false, 0, 1.0f, 0.0f},
      {"3d 3x3x3 s2 dil (2,1,1) 64 ch bf16", 2, 64, {7, 9, 10}, {3, 3, 3}, {2, 2, 1}, {1, 1, 1}, {2, 1, 1}, {2, 1, 1}, {2, 1, 1}, BF, BF, BF, true, 7, 1.0f, 0.5f},
      {"1d k31 dil4 f32 1024 long", 2, 8, {1, 1, 1024}, {1, 1, 31}, {1, 1, 1}, {1, 1, 1}, {1, 1, 4}, {0, 0, 60}, {0, 0, 60}, F32, F32, NONE, false, 0, 1.0f, 0.0f},
      {"2d 31x31 large kernel bf16", 1, 8, {1, 33, 34}, {1, 31, 31}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 15, 15}, {0, 15, 15}, BF, BF, NONE, false, 0, 1.0f, 0.0f},
      {"empty batch bf16", 0, 8, {1, 4, 4}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, BF, BF, NONE, false, 0, 1.0f, 0.0f},
  };
  // clang-format on
  int failed = 0, n = 0;
  // Every case on the direct loop, then on the default choice (the tiled
  // kernel wherever it serves: all but input dilation).
  for (DwKernel k : {DwKernel::kDirect, DwKernel::kAuto})
    for (const Case& c : cases) {
      ++n;
      failed += RunCase(c, k) ? 0 : 1;
    }
  // The tiled kernel refuses what it cannot serve, by name.
  for (const Case& c : cases) {
    if (c.in_dil[1] == 1 && c.in_dil[2] == 1) continue;
    ++n;
    ConvFwdArgs q;
    q.g.batch = 1;
    q.g.in_channels = q.g.out_channels = q.g.groups = 8;
    q.g.in = c.in;
    q.g.out = OutOf(c);
    q.g.window = c.window;
    q.g.in_dilation = c.in_dil;
    q.g.pad_lo = c.pad_lo;
    q.dtype = q.out_dtype = BF;
    Buf bx(4096 * 64), bw(4096), by(4096 * 64);
    q.x = bx.d;
    q.w = bw.d;
    q.y = by.d;
    const LaunchStatus st = DepthwiseFwdCuda(q, 0, DwKernel::kTiled);
    if (!st.refused()) {
      std::printf("FAIL refuse tiled: %s\n", c.name);
      ++failed;
    }
  }
  // Refusals.
  ConvFwdArgs p;
  p.g.batch = 1;
  p.g.in_channels = p.g.out_channels = p.g.groups = 12;  // 12 % 8 != 0 for bf16
  p.dtype = p.out_dtype = BF;
  ++n;
  if (DepthwiseFwdRefusal(p) == nullptr) {
    std::printf("FAIL refuse: 12 bf16 channels\n");
    ++failed;
  }
  p.g.groups = 1;
  p.g.in_channels = p.g.out_channels = 16;
  ++n;
  if (DepthwiseFwdRefusal(p) == nullptr) {
    std::printf("FAIL refuse: groups 1\n");
    ++failed;
  }
  std::printf("%d of %d cases passed\n", n - failed, n);
  if (failed == 0) std::printf("ALL PASSED\n");
  return failed == 0 ? 0 : 1;
}

int Bench() {
  for (DwKernel kernel : {DwKernel::kAuto, DwKernel::kDirect})
    for (int dil : {1, 2, 4}) {
      ConvFwdArgs p;
      p.g.batch = 128;
      p.g.in_channels = p.g.out_channels = p.g.groups = 256;
      p.g.algorithm = kAlgoDirect;
      p.g.in = {1, 56, 56};
      p.g.out = {1, 56, 56};
      p.g.window = {1, 3, 3};
      p.g.k_dilation = {1, dil, dil};
      p.g.pad_lo = {0, dil, dil};
      p.dtype = p.out_dtype = BF;
      const size_t elems = size_t(128) * 56 * 56 * 256;
      Buf x(elems * 2), y(elems * 2), w(9 * 256 * 2);
      CHECK_CUDA(cudaMemset(x.d, 0, elems * 2));
      CHECK_CUDA(cudaMemset(w.d, 0, 9 * 256 * 2));
      p.x = x.d;
      p.w = w.d;
      p.y = y.d;
      cudaEvent_t e0, e1;
      CHECK_CUDA(cudaEventCreate(&e0));
      CHECK_CUDA(cudaEventCreate(&e1));
      for (int i = 0; i < 3; ++i) CHECK_CUDA(DepthwiseFwdCuda(p, 0, kernel));
      const int reps = 20;
      CHECK_CUDA(cudaEventRecord(e0));
      for (int i = 0; i < reps; ++i) CHECK_CUDA(DepthwiseFwdCuda(p, 0, kernel));
      CHECK_CUDA(cudaEventRecord(e1));
      CHECK_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      const double us = 1000.0 * ms / reps;
      std::printf("bench depthwise 3x3 dil%d 56x56x256 n128 bf16 %-6s: %.1f us, %.2f TB/s (x + y once)\n",
                  dil, kernel == DwKernel::kDirect ? "direct" : "auto", us, 2.0 * elems * 2 / us / 1e6);
    }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  return mode == "bench" ? Bench() : Check();
}
