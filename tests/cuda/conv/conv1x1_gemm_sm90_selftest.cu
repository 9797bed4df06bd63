// Standalone self-test and benchmark of the 1x1 forward convolution as a
// CUTLASS sm90 persistent GEMM (cpp/conv/sm90/conv1x1_gemm_sm90.cu), built
// and run by tests/cuda/conv/build_and_run.sh (SELFTEST=gemm1x1; its
// `gemm1x1_srcs` list the sources this binary links) or the CMake target
// conv1x1_gemm_sm90_selftest (-DJAXDNN_CUDA_SELFTESTS=ON).
// Modes: no argument runs every case on fixed-seed inputs and checks
//   - every output written and finite (y is poisoned with NaN first), and the
//     z buffer untouched (the forward saves no pre-activation: relu and
//     relu6 save y itself);
//   - sampled rows (all rows of small problems; the first, last and
//     tile-boundary rows and random ones of large ones), every channel,
//     against a float64 host reference of problem.h's formulas;
//   - every output against the sm90 implicit-GEMM convolution
//     (conv_fprop_sm90.cu) on the same operands: same tolerance, and the
//     number of bitwise-equal outputs reported (both run the same CUTLASS
//     fusion over the same K order);
// and that the launcher refuses what it must (plan refusals with their
// reason, run-time ones: misaligned x, a short workspace). Prints one line
// per case and "ALL PASSED" (exit 0) when all pass. JAXDNN_CONV_1X1_GEMM=128
// or 256 forces the tile on every case (build_and_run.sh runs both).
// "bench" times the 12 distinct 1x1 stride-1 layers of ResNet-50 at batch
// 128, bfloat16, on the GEMM and on the implicit-GEMM convolution (20
// warm-ups, 100 timed calls of each whole launcher) and prints us, TFLOP/s
// and GB/s (x + w + y).
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
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/activation.h"
#include "common/launch_status.h"
#include "conv/problem.h"
#include "conv/sm90/conv1x1_gemm_sm90.h"
#include "conv/sm90/conv_fprop_sm90.h"

#include "../common/selftest_util.cuh"

namespace {

using sm90_selftest::HostFromF;
using sm90_selftest::HostToF;
using sm90_selftest::NextBits;
using sm90_selftest::NextUniform;

using jaxdnn::Act;
using jaxdnn::conv::ConvFwdArgs;
using jaxdnn::ffi::DataType;

enum class Expect { kRun, kPlanRefusal, kRunRefusal };

struct Spec {
  std::string name;
  bool f16 = false;
  int64_t batch = 1, cin = 64, cout = 64, groups = 1;
  std::array<int64_t, 3> in{1, 1, 1};
  // Only refusal cases leave the pointwise geometry.
  std::array<int64_t, 3> window{1, 1, 1}, stride{1, 1, 1}, lo{0, 0, 0}, hi{0, 0, 0}, kdil{1, 1, 1};
  int act = 0;
  int saved = -1;  // -1: the one the activation implies (api.py's rule)
  bool bias = false;
  DataType bias_dtype = DataType::F32;
  bool bias_unaligned = false;  // a float32 bias 4 bytes off 16-byte alignment (widened)
  bool residual = false;
  DataType residual_dtype = DataType::INVALID;  // INVALID: y's dtype
  DataType dtype = DataType::INVALID;           // INVALID: f16 ? F16 : BF16
  float alpha = 1.0f, beta = 1.0f;
  Expect expect = Expect::kRun;
  bool misalign_x = false, short_workspace = false;
};

DataType DtypeOf(const Spec& s) {
  if (s.dtype != DataType::INVALID) return s.dtype;
  return s.f16 ? DataType::F16 : DataType::BF16;
}

ConvFwdArgs MakeArgs(const Spec& s) {
  ConvFwdArgs p;
  auto& g = p.g;
  g.batch = s.batch;
  g.in_channels = s.cin;
  g.out_channels = s.cout;
  g.groups = s.groups;
  g.algorithm = jaxdnn::conv::kAlgoImplicitGemm;
  for (int k = 0; k < 3; ++k) {
    g.in[k] = s.in[k];
    g.window[k] = s.window[k];
    g.stride[k] = s.stride[k];
    g.k_dilation[k] = s.kdil[k];
    g.pad_lo[k] = s.lo[k];
    const int64_t span = s.in[k] + s.lo[k] + s.hi[k] - ((s.window[k] - 1) * s.kdil[k] + 1);
    g.out[k] = span < 0 ? 0 : span / s.stride[k] + 1;
  }
  p.e.act = s.act;
  p.e.alpha = s.alpha;
  p.e.beta = s.beta;
  p.e.has_bias = s.bias;
  p.e.has_residual = s.residual;
  const bool from_output = s.act == int(Act::kRelu) || s.act == int(Act::kRelu6);
  p.e.saved = s.saved >= 0  ? s.saved
              : s.act == 0  ? jaxdnn::conv::kSaveNothing
              : from_output ? jaxdnn::conv::kSaveOutput
                            : jaxdnn::conv::kSavePreact;
  p.dtype = p.out_dtype = DtypeOf(s);
  if (s.bias) p.bias_dtype = s.bias_dtype;
  if (s.residual) p.residual_dtype = s.residual_dtype != DataType::INVALID ? s.residual_dtype : p.dtype;
  return p;
}

void* Upload(const void* h, size_t bytes) {
  void* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, std::max<size_t>(bytes, 1)));
  if (bytes > 0) CHECK_CUDA(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  return d;
}

template <class T>
std::vector<T> Download(const void* d, int64_t count) {
  std::vector<T> h(size_t(std::max<int64_t>(count, 0)));
  if (count > 0) CHECK_CUDA(cudaMemcpy(h.data(), d, size_t(count) * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// One case's operands: host copies (16-bit storage, the bias as the kernel
// reads it) and device buffers; y and y_conv poisoned with NaN, z too.
struct Operands {
  bool f16 = false;
  int64_t m = 0, k = 0, n = 0;
  std::vector<uint16_t> x, w, res;
  std::vector<float> bias;  // the values in the bias dtype, as float
  void *dx = nullptr, *dw = nullptr, *dbias = nullptr, *dres = nullptr;
  void *dy = nullptr, *dy_conv = nullptr, *dz = nullptr, *ws = nullptr, *ws_conv = nullptr;
  size_t ws_bytes = 0, ws_conv_bytes = 0;

  Operands(const Spec& s, ConvFwdArgs* p, uint64_t seed) {
    sm90_selftest::g_rng = seed;
    f16 = DtypeOf(s) == DataType::F16;
    const auto& g = p->g;
    m = g.batch * g.in_positions();
    k = g.in_channels;
    n = g.out_channels;
    const int64_t w_count = g.taps() * (g.in_channels / std::max<int64_t>(g.groups, 1)) * g.out_channels;
    const int64_t y_count = g.batch * g.out_positions() * g.out_channels;
    x.resize(size_t(m * k));
    w.resize(size_t(w_count));
    for (auto& v : x) v = HostFromF(NextUniform(), f16);
    // Weights ~ 1/sqrt(fan-in), so outputs stay near unit scale.
    const float wscale = 1.0f / std::sqrt(float(std::max<int64_t>(1, g.taps() * g.in_channels)));
    for (auto& v : w) v = HostFromF(NextUniform() * wscale, f16);
    if (s.residual) {
      res.resize(size_t(y_count));
      for (auto& v : res) v = HostFromF(NextUniform(), f16);
    }
    // x one element (2 bytes) past a 16-byte boundary where the case asks.
    const size_t x_off = s.misalign_x ? 2 : 0;
    std::vector<uint8_t> xbytes(x.size() * 2 + x_off);
    std::memcpy(xbytes.data() + x_off, x.data(), x.size() * 2);
    dx = static_cast<char*>(Upload(xbytes.data(), xbytes.size())) + x_off;
    dw = Upload(w.data(), w.size() * 2);
    if (s.residual) dres = Upload(res.data(), res.size() * 2);
    if (s.bias) {
      bias.resize(size_t(n));
      const size_t off = s.bias_unaligned ? 4 : 0;
      std::vector<uint8_t> typed(size_t(n) * 8 + off);
      for (int64_t c = 0; c < n; ++c) {
        const float v = NextUniform() * 0.5f;
        uint8_t* at = typed.data() + off;
        switch (s.bias_dtype) {
          case DataType::BF16:
          case DataType::F16: {
            const uint16_t b = HostFromF(v, s.bias_dtype == DataType::F16);
            std::memcpy(at + c * 2, &b, 2);
            bias[c] = HostToF(b, s.bias_dtype == DataType::F16);
            break;
          }
          case DataType::F64: {
            const double d = v;
            std::memcpy(at + c * 8, &d, 8);
            bias[c] = v;
            break;
          }
          default: std::memcpy(at + c * 4, &v, 4); bias[c] = v;
        }
      }
      dbias = static_cast<char*>(Upload(typed.data(), typed.size())) + off;
    }
    const size_t y_bytes = size_t(std::max<int64_t>(y_count, 1)) * 2;
    CHECK_CUDA(cudaMalloc(&dy, y_bytes));
    CHECK_CUDA(cudaMalloc(&dy_conv, y_bytes));
    CHECK_CUDA(cudaMalloc(&dz, y_bytes));
    CHECK_CUDA(cudaMemset(dy, 0xFF, y_bytes));  // NaN where nothing is written
    CHECK_CUDA(cudaMemset(dy_conv, 0xFF, y_bytes));
    CHECK_CUDA(cudaMemset(dz, 0xFF, y_bytes));
    p->x = dx;
    p->w = dw;
    p->bias = dbias;
    p->residual = dres;
    p->y = dy;
    p->z = dz;  // never written: every served epilogue saves y or nothing
    ws_bytes = jaxdnn::conv::Conv1x1GemmSm90Workspace(*p);
    if (s.short_workspace) ws_bytes = ws_bytes > 0 ? ws_bytes - 256 : 0;
    CHECK_CUDA(cudaMalloc(&ws, std::max<size_t>(ws_bytes, 1)));
    ws_conv_bytes = jaxdnn::conv::ConvFpropSm90Workspace(*p);
    CHECK_CUDA(cudaMalloc(&ws_conv, std::max<size_t>(ws_conv_bytes, 1)));
  }
  ~Operands() {
    // The offset pointers came from cudaMalloc one element or 4 bytes lower.
    char* x_base = static_cast<char*>(dx) - (reinterpret_cast<uintptr_t>(dx) % 16);
    char* b_base = dbias ? static_cast<char*>(dbias) - (reinterpret_cast<uintptr_t>(dbias) % 16) : nullptr;
    for (void* b :
         {static_cast<void*>(x_base), dw, static_cast<void*>(b_base), dres, dy, dy_conv, dz, ws, ws_conv})
      cudaFree(b);
  }
};

// y at (row, co) in float64 from the stored operands.
double Reference(const Spec& s, const Operands& op, int64_t row, int64_t co) {
  double acc = 0.0;
  for (int64_t ci = 0; ci < op.k; ++ci) {
    acc += double(HostToF(op.x[size_t(row * op.k + ci)], op.f16)) *
           double(HostToF(op.w[size_t(ci * op.n + co)], op.f16));
  }
  double z = double(s.alpha) * acc;
  if (s.bias) z += op.bias[size_t(co)];
  if (s.residual) z += double(s.beta) * HostToF(op.res[size_t(row * op.n + co)], op.f16);
  if (s.act == int(Act::kRelu)) z = std::max(z, 0.0);
  if (s.act == int(Act::kRelu6)) z = std::min(std::max(z, 0.0), 6.0);
  return z;
}

// The rows the host reference checks: all of a small problem; else the
// first and last rows, those around every 128-row tile boundary of the
// first and last tiles, and 160 drawn at random.
std::vector<int64_t> SampleRows(int64_t m) {
  std::set<int64_t> rows;
  if (m <= 768) {
    for (int64_t r = 0; r < m; ++r) rows.insert(r);
  } else {
    for (int64_t r : {int64_t(0), int64_t(1), int64_t(127), int64_t(128), int64_t(129), int64_t(255),
                      int64_t(256), m / 2, m - 129, m - 128, m - 127, m - 2, m - 1})
      rows.insert(r);
    const int64_t last_tile = m / 128 * 128;
    for (int64_t r = last_tile - 1; r < m; r += 7) rows.insert(r);
    for (int i = 0; i < 160; ++i) rows.insert(int64_t(NextBits() % uint64_t(m)));
  }
  return {rows.begin(), rows.end()};
}

bool CheckRefusal(const Spec& s, const ConvFwdArgs& p, const jaxdnn::LaunchStatus& st) {
  const char* plan = jaxdnn::conv::Conv1x1GemmSm90Refusal(p);
  // A plan refusal is the plan's (and so the launcher's); a run-time one
  // passes the plan and is the launcher's alone.
  const bool plan_ok = s.expect == Expect::kPlanRefusal ? plan != nullptr : plan == nullptr;
  const bool ok = !st.ok() && plan_ok;
  std::printf("%-52s %s  %s\n", s.name.c_str(),
              st.ok() ? "ran, should refuse" : ("refused: " + st.Text()).c_str(), ok ? "PASS" : "FAIL");
  if (!plan_ok) std::printf("    the plan %s\n", plan ? "refuses it too" : "does not refuse it");
  return ok;
}

bool CheckCase(const Spec& s, uint64_t seed) {
  ConvFwdArgs p = MakeArgs(s);
  Operands op(s, &p, seed);
  const jaxdnn::LaunchStatus st = jaxdnn::conv::Conv1x1GemmSm90(p, op.ws, op.ws_bytes, nullptr);
  if (s.expect != Expect::kRun) {
    CHECK_CUDA(cudaDeviceSynchronize());
    return CheckRefusal(s, p, st);
  }
  if (!st.ok()) {
    std::printf("%-52s launcher failed: %s  FAIL\n", s.name.c_str(), st.Text().c_str());
    CHECK_CUDA(cudaDeviceSynchronize());
    return false;
  }
  // The implicit-GEMM convolution on the same operands, into y_conv.
  ConvFwdArgs pc = p;
  pc.y = op.dy_conv;
  const jaxdnn::LaunchStatus sc = jaxdnn::conv::ConvFpropSm90(pc, op.ws_conv, op.ws_conv_bytes, nullptr);
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("%-52s CUDA error %s  FAIL\n", s.name.c_str(), cudaGetErrorString(err));
    std::exit(2);  // the context is gone
  }
  const int64_t count = op.m * op.n;
  const auto y = Download<uint16_t>(op.dy, count);
  const auto yc = Download<uint16_t>(op.dy_conv, sc.ok() ? count : 0);
  const auto z = Download<uint16_t>(op.dz, count);
  int64_t nonfinite = 0, z_written = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(HostToF(y[size_t(i)], op.f16))) ++nonfinite;
    if (z[size_t(i)] != 0xFFFF) ++z_written;
  }
  // Per element: a rounding of the 16-bit output (2^-8 relative for
  // bfloat16, 2^-11 for float16) plus a little of the output's scale.
  const double rel = op.f16 ? 2e-3 : 8e-3;
  double max_ref = 1e-3;
  struct Worst {
    double excess = -1.0, got = 0.0, want = 0.0;
    int64_t row = 0, col = 0;
  } worst;
  const std::vector<int64_t> rows = SampleRows(op.m);
  std::vector<double> want(rows.size() * size_t(op.n));
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t co = 0; co < op.n; ++co) {
      want[i * size_t(op.n) + size_t(co)] = Reference(s, op, rows[i], co);
      max_ref = std::max(max_ref, std::fabs(want[i * size_t(op.n) + size_t(co)]));
    }
  }
  const double abs_tol = 2e-3 * max_ref;
  int64_t bad = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t co = 0; co < op.n; ++co) {
      const double w = want[i * size_t(op.n) + size_t(co)];
      const double got = HostToF(y[size_t(rows[i] * op.n + co)], op.f16);
      const double excess = std::fabs(got - w) - (rel * std::fabs(w) + abs_tol);
      if (!(excess <= 0.0)) ++bad;
      if (!(excess <= worst.excess)) worst = {std::isfinite(excess) ? excess : 1e30, got, w, rows[i], co};
    }
  }
  // Against the implicit-GEMM convolution, every element.
  int64_t conv_bad = 0, bitwise = 0;
  if (sc.ok()) {
    for (int64_t i = 0; i < count; ++i) {
      const double a = HostToF(y[size_t(i)], op.f16), b = HostToF(yc[size_t(i)], op.f16);
      if (y[size_t(i)] == yc[size_t(i)]) ++bitwise;
      if (!(std::fabs(a - b) <= rel * std::fabs(b) + abs_tol)) ++conv_bad;
    }
  }
  const bool pass = nonfinite == 0 && z_written == 0 && bad == 0 && conv_bad == 0 && sc.ok();
  std::printf("%-52s %s M=%lld N=%lld K=%lld tile 128x%d  rows %zu, worst excess %.2e  conv: %s  %s\n",
              s.name.c_str(), op.f16 ? "f16 " : "bf16", (long long)op.m, (long long)op.n, (long long)op.k,
              jaxdnn::conv::Conv1x1GemmSm90TileN(p), rows.size(), std::max(worst.excess, 0.0),
              sc.ok() ? (std::to_string(bitwise) + "/" + std::to_string(count) + " bitwise").c_str()
                      : ("refused: " + sc.Text()).c_str(),
              pass ? "PASS" : "FAIL");
  if (nonfinite) std::printf("    %lld outputs not finite (unwritten?)\n", (long long)nonfinite);
  if (z_written) std::printf("    %lld z elements written\n", (long long)z_written);
  if (bad) {
    std::printf("    %lld outside tolerance; worst at row %lld col %lld: got %g, want %g\n", (long long)bad,
                (long long)worst.row, (long long)worst.col, worst.got, worst.want);
  }
  if (conv_bad)
    std::printf("    %lld outputs differ from the convolution's beyond tolerance\n", (long long)conv_bad);
  return pass;
}

Spec Pointwise(const std::string& name, int64_t n, int64_t h, int64_t w, int64_t cin, int64_t cout) {
  Spec s;
  s.name = name;
  s.batch = n;
  s.in = {1, h, w};
  s.cin = cin;
  s.cout = cout;
  return s;
}

std::vector<Spec> CheckSpecs() {
  std::vector<Spec> v;
  // Plain, odd M (3 * 7 * 7 = 147: one partial 128-row tile), every C_out
  // width the brief names.
  for (int64_t cout : {64, 128, 256, 2048}) {
    Spec s = Pointwise("7x7 n3 256->" + std::to_string(cout), 3, 7, 7, 256, cout);
    v.push_back(s);
  }
  // C_in from 64 to 2048, with partial K tiles (72 = 64 + 8, 200).
  for (int64_t cin : {64, 72, 200, 512, 2048}) {
    v.push_back(Pointwise("9x11 n2 " + std::to_string(cin) + "->128 (M 198)", 2, 9, 11, cin, 128));
  }
  // C_in and C_out at the 8-channel minimum, and C_out off any tile (200).
  v.push_back(Pointwise("5x5 n1 8->8 (M 25)", 1, 5, 5, 8, 8));
  v.push_back(Pointwise("13x13 n2 96->200", 2, 13, 13, 96, 200));
  // Every epilogue piece, on a layer with several M tiles and a partial one
  // (M 2 * 19 * 19 = 722), bfloat16 and float16.
  for (bool f16 : {false, true}) {
    const std::string dt = f16 ? " (f16)" : "";
    Spec s = Pointwise("19x19 n2 128->256 + bias(f32)" + dt, 2, 19, 19, 128, 256);
    s.f16 = f16;
    s.bias = true;
    v.push_back(s);
    s.name = "  + relu" + dt;
    s.act = int(Act::kRelu);
    v.push_back(s);
    s.name = "  + relu6, bias(bf16)" + dt;
    s.act = int(Act::kRelu6);
    s.bias_dtype = DataType::BF16;
    v.push_back(s);
    s.name = "  + residual, alpha .5 beta 2, bias(f16)" + dt;
    s.act = int(Act::kIdentity);
    s.bias_dtype = DataType::F16;
    s.residual = true;
    s.alpha = 0.5f;
    s.beta = 2.0f;
    v.push_back(s);
    s.name = "  + residual + relu, bias(f64)" + dt;
    s.act = int(Act::kRelu);
    s.bias_dtype = DataType::F64;
    v.push_back(s);
    s.name = "  + residual (beta -1) + relu6, no bias" + dt;
    s.bias = false;
    s.beta = -1.0f;
    s.act = int(Act::kRelu6);
    v.push_back(s);
    s.name = "  + residual + relu, bias(f32) off 16B" + dt;
    s.bias = true;
    s.bias_dtype = DataType::F32;
    s.bias_unaligned = true;
    s.beta = 1.0f;
    s.act = int(Act::kRelu);
    v.push_back(s);
  }
  // 1-D and 3-D pointwise layers (the positions are one GEMM dimension).
  Spec s = Spec();
  s.name = "1d w=301 n3 64->96 + bias + relu";
  s.batch = 3;
  s.in = {1, 1, 301};
  s.cin = 64;
  s.cout = 96;
  s.bias = true;
  s.act = int(Act::kRelu);
  v.push_back(s);
  s = Spec();
  s.name = "3d 5x6x7 n2 32->64 + residual";
  s.batch = 2;
  s.in = {5, 6, 7};
  s.cin = 32;
  s.cout = 64;
  s.residual = true;
  v.push_back(s);
  // ResNet-50-like layers at a small batch: enough tiles for the 256-wide
  // tile's rule (two waves of 132 SMs) and the persistent CTAs' several
  // tiles each; the stage-4 layers with M 2 * 49 = 98 (one partial tile).
  s = Pointwise("28x28 n24 128->512 + bias + res + relu", 24, 28, 28, 128, 512);
  s.bias = true;
  s.residual = true;
  s.act = int(Act::kRelu);
  v.push_back(s);
  s = Pointwise("56x56 n4 64->256 + bias + relu", 4, 56, 56, 64, 256);
  s.bias = true;
  s.bias_dtype = DataType::BF16;
  s.act = int(Act::kRelu);
  v.push_back(s);
  s = Pointwise("14x14 n9 1024->256 (f16)", 9, 14, 14, 1024, 256);
  s.f16 = true;
  v.push_back(s);
  v.push_back(Pointwise("7x7 n2 2048->512", 2, 7, 7, 2048, 512));
  v.push_back(Pointwise("7x7 n2 512->2048", 2, 7, 7, 512, 2048));
  s = Pointwise("7x7 n70 2048->2048 + bias + relu", 70, 7, 7, 2048, 2048);
  s.bias = true;
  s.act = int(Act::kRelu);
  v.push_back(s);
  // Empty: nothing to do, success.
  v.push_back(Pointwise("empty batch", 0, 7, 7, 64, 64));

  // What the plan must refuse.
  auto refuse = [&](Spec r, const char* why) {
    r.name = std::string("refuse: ") + why;
    r.expect = Expect::kPlanRefusal;
    v.push_back(r);
  };
  const Spec base = Pointwise("", 1, 8, 8, 64, 64);
  Spec r = base;
  r.cin = 12;
  refuse(r, "C_in 12");
  r = base;
  r.cin = 4;
  refuse(r, "C_in 4");
  r = base;
  r.cout = 20;
  refuse(r, "C_out 20");
  r = base;
  r.window = {1, 3, 3};
  r.lo = r.hi = {0, 1, 1};
  refuse(r, "3x3 window");
  r = base;
  r.stride = {1, 2, 2};
  refuse(r, "stride 2");
  r = base;
  r.lo = r.hi = {0, 1, 1};
  refuse(r, "padding 1");
  r = base;
  r.hi = {0, 1, 1};
  refuse(r, "high padding only");
  r = base;
  r.groups = 2;
  refuse(r, "groups 2");
  r = base;
  r.act = int(Act::kGeluTanh);
  refuse(r, "gelu (saves z)");
  r = base;
  r.act = int(Act::kRelu);
  r.saved = jaxdnn::conv::kSavePreact;
  refuse(r, "relu with z saved");
  r = base;
  r.dtype = DataType::F32;
  refuse(r, "float32 x");
  r = base;
  r.residual = true;
  r.residual_dtype = DataType::F32;
  refuse(r, "float32 residual for bf16 y");
  // What the launcher refuses at run time.
  r = base;
  r.name = "refuse at run: x off 16-byte alignment";
  r.expect = Expect::kRunRefusal;
  r.misalign_x = true;
  v.push_back(r);
  r = base;
  r.name = "refuse at run: workspace short (bias)";
  r.expect = Expect::kRunRefusal;
  r.bias = true;
  r.short_workspace = true;
  v.push_back(r);
  return v;
}

int Check() {
  bool all = true;
  uint64_t seed = 0x9E3779B97F4A7C15ull;
  for (const Spec& s : CheckSpecs()) all = CheckCase(s, seed += 0x1234567ull) && all;
  std::printf(all ? "ALL PASSED\n" : "SOME FAILED\n");
  return all ? 0 : 1;
}

double TimeMs(const std::function<void()>& launch) {
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
  CHECK_CUDA(cudaEventDestroy(t0));
  CHECK_CUDA(cudaEventDestroy(t1));
  return ms / 100.0;
}

int Bench() {
  struct Layer {
    int64_t hw, cin, cout;
  };
  // ResNet-50's distinct 1x1 stride-1 convolutions.
  const Layer layers[] = {{56, 64, 64},    {56, 64, 256},   {56, 256, 64},  {56, 256, 128},
                          {28, 128, 512},  {28, 512, 128},  {28, 512, 256}, {14, 256, 1024},
                          {14, 1024, 256}, {14, 1024, 512}, {7, 512, 2048}, {7, 2048, 512}};
  for (const Layer& l : layers) {
    for (bool epilogue : {false, true}) {
      Spec s = Pointwise("", 128, l.hw, l.hw, l.cin, l.cout);
      s.bias = s.residual = epilogue;
      s.bias_dtype = DataType::BF16;
      s.act = epilogue ? int(Act::kRelu) : 0;
      ConvFwdArgs p = MakeArgs(s);
      Operands op(s, &p, 42);
      ConvFwdArgs pc = p;
      pc.y = op.dy_conv;
      const double gemm =
          TimeMs([&] { CHECK_CUDA(jaxdnn::conv::Conv1x1GemmSm90(p, op.ws, op.ws_bytes, nullptr)); });
      const double conv =
          TimeMs([&] { CHECK_CUDA(jaxdnn::conv::ConvFpropSm90(pc, op.ws_conv, op.ws_conv_bytes, nullptr)); });
      const double flop = 2.0 * op.m * op.n * op.k;
      const double bytes = 2.0 * (op.m * op.k + op.k * op.n + op.m * op.n * (epilogue ? 2 : 1));
      std::printf(
          "bench 1x1 %2lldx%-2lld %4lld->%-4lld n128 %-19s GEMM(128x%d) %8.1f us %5.0f TFLOP/s %5.2f TB/s | "
          "conv %8.1f us %5.0f TFLOP/s | %.2fx\n",
          (long long)l.hw, (long long)l.hw, (long long)l.cin, (long long)l.cout,
          epilogue ? "+bias+res+relu" : "plain", jaxdnn::conv::Conv1x1GemmSm90TileN(p), gemm * 1e3,
          flop / (gemm * 1e-3) / 1e12, bytes / (gemm * 1e-3) / 1e12, conv * 1e3, flop / (conv * 1e-3) / 1e12,
          conv / gemm);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d), %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  if (prop.major != 9) {
    std::printf("needs an sm_90 GPU\n");
    return 1;
  }
  if (argc > 1 && std::string(argv[1]) == "bench") return Bench();
  return Check();
}
