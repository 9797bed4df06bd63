// Self-test of the CUDA depthwise weight gradient (cpp/conv/sm80/
// depthwise_wgrad.cu) against a float64 host sum: 1D/2D/3D, strides,
// padding, kernel dilation, windows of more than 9 taps (several passes),
// channel tails, every dtype, float32 dw, alpha, an empty batch; bitwise
// repeatable; the refusals. bench: the issue's depthwise 3x3 56x56x256 layers
// at batch 128 (dilation 1, 2, 4), x and dz read once over the time.
//   depthwise_wgrad_selftest check | bench
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../common/selftest_util.cuh"
#include "conv/sm80/depthwise_wgrad.h"
#include "dw_selftest_util.cuh"

using namespace jaxdnn;
using namespace jaxdnn::conv;
using namespace dw_selftest;
using sm90_selftest::NextUniform;

namespace {

using DT = ffi::DataType;
constexpr DT F32 = DT::F32, BF = DT::BF16, F16 = DT::F16;

struct Case {
  const char* name;
  int64_t n, c;
  std::array<int64_t, 3> in, window, stride, k_dil, pad_lo, pad_hi;
  DT dtype, dw_dtype;
  float alpha;
};

ConvGeometry GeometryOf(const Case& c) {
  ConvGeometry g;
  g.batch = c.n;
  g.in_channels = g.out_channels = g.groups = c.c;
  g.in = c.in;
  g.window = c.window;
  g.stride = c.stride;
  g.k_dilation = c.k_dil;
  g.pad_lo = c.pad_lo;
  for (int k = 0; k < 3; ++k) {
    const int64_t span = c.in[k] + c.pad_lo[k] + c.pad_hi[k], eff = (c.window[k] - 1) * c.k_dil[k] + 1;
    g.out[k] = span >= eff ? (span - eff) / c.stride[k] + 1 : 0;
  }
  return g;
}

// Runs the case twice (bitwise equal), checks against the float64 sum.
bool RunCase(const Case& c) {
  DepthwiseWgradArgs p;
  p.g = GeometryOf(c);
  p.dtype = c.dtype;
  p.dw_dtype = c.dw_dtype;
  p.alpha = c.alpha;
  const ConvGeometry& g = p.g;
  const int64_t xn = c.n * g.in_positions() * c.c, yn = c.n * g.out_positions() * c.c, taps = g.taps();
  std::vector<float> x(xn), dz(yn);
  std::vector<uint8_t> xb(xn * Bytes(c.dtype)), zb(yn * Bytes(c.dtype));
  for (int64_t i = 0; i < xn; ++i) PutBits(xb, i, x[i] = Round(NextUniform(), c.dtype), c.dtype);
  for (int64_t i = 0; i < yn; ++i) PutBits(zb, i, dz[i] = Round(NextUniform(), c.dtype), c.dtype);
  if (const char* why = DepthwiseWgradRefusal(p)) {
    std::printf("FAIL %-44s refused: %s\n", c.name, why);
    return false;
  }
  Buf dx(xb), ddz(zb), dw(taps * c.c * Bytes(c.dw_dtype)), ws(DepthwiseWgradWorkspace(p));
  p.x = dx.d;
  p.dz = ddz.d;
  p.dw = dw.d;
  p.workspace = ws.d;
  p.workspace_bytes = DepthwiseWgradWorkspace(p);
  std::vector<uint8_t> first(taps * c.c * Bytes(c.dw_dtype)), second(first.size());
  CHECK_CUDA(DepthwiseWgradCuda(p, 0));
  CHECK_CUDA(cudaMemcpy(first.data(), dw.d, first.size(), cudaMemcpyDeviceToHost));
  CHECK_CUDA(DepthwiseWgradCuda(p, 0));
  CHECK_CUDA(cudaMemcpy(second.data(), dw.d, second.size(), cudaMemcpyDeviceToHost));
  const bool repeatable = first == second;
  std::vector<double> want(taps * c.c, 0.0), scale(taps * c.c, 0.0);
  const auto& o = g.out;
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t od = 0; od < o[0]; ++od)
      for (int64_t oh = 0; oh < o[1]; ++oh)
        for (int64_t ow = 0; ow < o[2]; ++ow)
          for (int64_t kd = 0; kd < c.window[0]; ++kd)
            for (int64_t kh = 0; kh < c.window[1]; ++kh)
              for (int64_t kw = 0; kw < c.window[2]; ++kw) {
                const int64_t oo[3] = {od, oh, ow}, kk[3] = {kd, kh, kw};
                int64_t ii[3];
                bool in = true;
                for (int k = 0; k < 3; ++k) {
                  ii[k] = oo[k] * c.stride[k] - c.pad_lo[k] + kk[k] * c.k_dil[k];
                  in = in && ii[k] >= 0 && ii[k] < c.in[k];
                }
                if (!in) continue;
                const int64_t tap = (kd * c.window[1] + kh) * c.window[2] + kw;
                const int64_t xi = (((n * c.in[0] + ii[0]) * c.in[1] + ii[1]) * c.in[2] + ii[2]) * c.c;
                const int64_t yi = (((n * o[0] + od) * o[1] + oh) * o[2] + ow) * c.c;
                for (int64_t ch = 0; ch < c.c; ++ch) {
                  want[tap * c.c + ch] += double(x[xi + ch]) * dz[yi + ch];
                  scale[tap * c.c + ch] += std::fabs(double(x[xi + ch]) * dz[yi + ch]);
                }
              }
  // float32 sums of many products: relative to the sum of magnitudes; the
  // 16-bit dw adds its rounding.
  const double tol = c.dw_dtype == F32 ? 1e-5 : 8e-3;
  double worst = 0;
  for (int64_t i = 0; i < taps * c.c; ++i) {
    const double got = GetBits(first, i, c.dw_dtype), w = c.alpha * want[i];
    worst = std::max(worst, std::fabs(got - w) / (tol * (1.0 + std::fabs(c.alpha) * scale[i])));
  }
  const bool ok = worst <= 1.0 && repeatable;
  std::printf("%s %-44s out %lldx%lldx%lld worst %.3g%s\n", ok ? "ok  " : "FAIL", c.name, (long long)o[0],
              (long long)o[1], (long long)o[2], worst, repeatable ? "" : " NOT REPEATABLE");
  return ok;
}

int Check() {
  // clang-format off
  const Case cases[] = {
      {"2d 3x3 s1 64 ch bf16", 2, 64, {1, 13, 11}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, BF, BF, 1.0f},
      {"2d 3x3 dil2 s2 f16 -> f32 dw, alpha", 3, 16, {1, 19, 21}, {1, 3, 3}, {1, 2, 2}, {1, 2, 2}, {0, 2, 2}, {0, 2, 2}, F16, F32, 0.5f},
      {"2d 3x3 dil4 72 ch bf16 (tail)", 2, 72, {1, 23, 57}, {1, 3, 3}, {1, 1, 1}, {1, 4, 4}, {0, 4, 4}, {0, 4, 4}, BF, F32, 1.0f},
      {"2d 5x5 asym pad f32", 2, 12, {1, 9, 10}, {1, 5, 5}, {1, 1, 1}, {1, 1, 1}, {0, 1, 3}, {0, 2, 0}, F32, F32, -1.5f},
      {"2d 7x7 dil2 s3 bf16 (6 passes)", 2, 32, {1, 30, 31}, {1, 7, 7}, {1, 3, 3}, {1, 2, 2}, {0, 6, 5}, {0, 6, 7}, BF, F32, 1.0f},
      {"3d 3x3x3 s2 bf16 (3 passes)", 2, 64, {7, 9, 10}, {3, 3, 3}, {2, 2, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, BF, F32, 1.0f},
      {"1d k31 dil4 f32 (4 passes)", 2, 8, {1, 1, 300}, {1, 1, 31}, {1, 1, 1}, {1, 1, 4}, {0, 0, 60}, {0, 0, 60}, F32, F32, 1.0f},
      {"2d window larger than input f32", 1, 4, {1, 2, 3}, {1, 5, 5}, {1, 1, 1}, {1, 1, 1}, {0, 2, 2}, {0, 2, 2}, F32, F32, 1.0f},
      {"2d 3x3 b40 56x56 bf16 (many tiles a CTA)", 40, 64, {1, 56, 56}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, BF, F32, 1.0f},
      {"empty batch bf16", 0, 8, {1, 4, 4}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, BF, BF, 1.0f},
  };
  // clang-format on
  int failed = 0, n = 0;
  for (const Case& c : cases) {
    ++n;
    failed += RunCase(c) ? 0 : 1;
  }
  DepthwiseWgradArgs p;
  p.g.batch = 1;
  p.g.in_channels = p.g.out_channels = p.g.groups = 16;
  p.g.in_dilation = {1, 2, 2};
  p.dtype = p.dw_dtype = BF;
  ++n;
  if (DepthwiseWgradRefusal(p) == nullptr) {
    std::printf("FAIL refuse: input dilation\n");
    ++failed;
  }
  p.g.in_dilation = {1, 1, 1};
  p.g.in_channels = p.g.out_channels = p.g.groups = 12;
  ++n;
  if (DepthwiseWgradRefusal(p) == nullptr) {
    std::printf("FAIL refuse: 12 bf16 channels\n");
    ++failed;
  }
  std::printf("%d of %d cases passed\n", n - failed, n);
  if (failed == 0) std::printf("ALL PASSED\n");
  return failed == 0 ? 0 : 1;
}

int Bench() {
  for (int dil : {1, 2, 4}) {
    DepthwiseWgradArgs p;
    p.g.batch = 128;
    p.g.in_channels = p.g.out_channels = p.g.groups = 256;
    p.g.in = {1, 56, 56};
    p.g.out = {1, 56, 56};
    p.g.window = {1, 3, 3};
    p.g.k_dilation = {1, dil, dil};
    p.g.pad_lo = {0, dil, dil};
    p.dtype = BF;
    p.dw_dtype = F32;
    const size_t elems = size_t(128) * 56 * 56 * 256;
    Buf x(elems * 2), dz(elems * 2), dw(9 * 256 * 4), ws(DepthwiseWgradWorkspace(p));
    CHECK_CUDA(cudaMemset(x.d, 0, elems * 2));
    CHECK_CUDA(cudaMemset(dz.d, 0, elems * 2));
    p.x = x.d;
    p.dz = dz.d;
    p.dw = dw.d;
    p.workspace = ws.d;
    p.workspace_bytes = DepthwiseWgradWorkspace(p);
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i) CHECK_CUDA(DepthwiseWgradCuda(p, 0));
    const int reps = 20;
    CHECK_CUDA(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i) CHECK_CUDA(DepthwiseWgradCuda(p, 0));
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    const double us = 1000.0 * ms / reps;
    std::printf(
        "bench depthwise wgrad 3x3 dil%d 56x56x256 n128 bf16: %.1f us, %.2f TB/s (x + dz once), workspace "
        "%zu B\n",
        dil, us, 2.0 * elems * 2 / us / 1e6, p.workspace_bytes);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  return mode == "bench" ? Bench() : Check();
}
