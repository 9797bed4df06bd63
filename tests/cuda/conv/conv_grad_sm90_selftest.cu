// Standalone self-test and benchmark of the CUTLASS sm90 gradient
// convolutions (cpp/conv/sm90/conv_dgrad_sm90.cu, conv_wgrad_sm90.cu), built
// and run by tests/cuda/conv/build_and_run.sh (its `grad_srcs` list the
// sources this binary links).
// Modes: no argument checks the data gradient (dx and the residual's
// gradient) and the weight gradient (dw and the bias gradient) of every case
// against a double-precision CPU reference (problem.h's formulas) on
// fixed-seed inputs, checks that the weight gradient is bitwise the same on
// a second run, and prints one line per gradient, refusals with their
// reason, "ALL PASSED" and exit 0 when all pass; "bench" times both
// gradients of ResNet-50 layers at batch 128 (10 warm-ups, 50 timed calls of
// the whole launcher: weight packing, pre-pass and partial sums included).
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
#include "conv/sm90/conv_dgrad_sm90.h"
#include "conv/sm90/conv_wgrad_sm90.h"

#include "../common/selftest_util.cuh"

namespace {

using sm90_selftest::HostFromF;
using sm90_selftest::HostToF;
using sm90_selftest::NextUniform;
using sm90_selftest::ToF;

using jaxdnn::Act;
using jaxdnn::conv::ConvDgradArgs;
using jaxdnn::conv::ConvGeometry;
using jaxdnn::conv::ConvWgradArgs;
using jaxdnn::conv::Epilogue;
using jaxdnn::ffi::DataType;

size_t DtypeBytes(DataType t) { return t == DataType::F32 ? 4 : 2; }
double ReadAs(const std::vector<uint8_t>& raw, DataType t, int64_t i) {
  if (t == DataType::F32) {
    float f;
    std::memcpy(&f, &raw[size_t(i) * 4], 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, &raw[size_t(i) * 2], 2);
  return HostToF(b, t == DataType::F16);
}

struct Spec {
  std::string name;
  bool f16 = false;
  int64_t batch = 1, cin = 8, cout = 8, groups = 1;
  std::array<int64_t, 3> in{1, 1, 1}, window{1, 1, 1}, stride{1, 1, 1}, kdil{1, 1, 1}, indil{1, 1, 1};
  std::array<int64_t, 3> lo{0, 0, 0}, hi{0, 0, 0};
  int act = 0;
  bool bias = false, residual = false;
  DataType bias_dtype = DataType::F32, residual_dtype = DataType::BF16, dy_dtype = DataType::INVALID;
  float alpha = 1.0f, beta = 1.0f;
  bool expect_dgrad = true, expect_wgrad = true;  // false: the launcher must refuse
};

ConvGeometry GeometryOf(const Spec& s) {
  ConvGeometry g;
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
  return g;
}

Epilogue EpilogueOf(const Spec& s) {
  Epilogue e;
  e.act = s.act;
  e.alpha = s.alpha;
  e.beta = s.beta;
  e.has_bias = s.bias;
  e.has_residual = s.residual;
  const bool from_y = s.act == int(Act::kRelu) || s.act == int(Act::kRelu6);
  e.saved = s.act == 0 ? jaxdnn::conv::kSaveNothing
                       : (from_y ? jaxdnn::conv::kSaveOutput : jaxdnn::conv::kSavePreact);
  return e;
}

void* Upload(const void* h, size_t bytes) {
  void* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, std::max<size_t>(bytes, 1)));
  if (bytes > 0) CHECK_CUDA(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  return d;
}
void* Alloc(size_t bytes, int fill) {
  void* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, std::max<size_t>(bytes, 1)));
  CHECK_CUDA(cudaMemset(d, fill, std::max<size_t>(bytes, 1)));
  return d;
}

// One case's host operands (16-bit bits) and device copies.
struct Operands {
  ConvGeometry g;
  Epilogue e;
  bool f16;
  DataType dy_dtype;
  std::vector<uint16_t> x, w, dy, saved;
  void *dx_ = nullptr, *x_ = nullptr, *w_ = nullptr, *dy_ = nullptr, *saved_ = nullptr;

  Operands(const Spec& s, uint64_t seed) : g(GeometryOf(s)), e(EpilogueOf(s)), f16(s.f16) {
    dy_dtype = s.dy_dtype == DataType::INVALID ? (f16 ? DataType::F16 : DataType::BF16) : s.dy_dtype;
    sm90_selftest::g_rng = seed;
    x.resize(size_t(g.batch * g.in_positions() * g.in_channels));
    w.resize(size_t(g.weights()));
    dy.resize(size_t(g.batch * g.out_positions() * g.out_channels));
    const float wscale = 1.0f / std::sqrt(float(std::max<int64_t>(1, g.taps() * g.in_channels)));
    for (auto& v : x) v = HostFromF(NextUniform(), f16);
    for (auto& v : w) v = HostFromF(NextUniform() * wscale, f16);
    for (auto& v : dy) v = HostFromF(NextUniform(), f16);
    if (e.saved != jaxdnn::conv::kSaveNothing) {
      // y of relu/relu6 (some exactly 0 and 6) or a pre-activation z.
      saved.resize(dy.size());
      for (auto& v : saved) {
        float u = 4.0f * NextUniform();
        if (e.saved == jaxdnn::conv::kSaveOutput) u = std::min(std::max(u * 2.0f, 0.0f), 6.0f);
        v = HostFromF(u, f16);
      }
    }
    x_ = Upload(x.data(), x.size() * 2);
    w_ = Upload(w.data(), w.size() * 2);
    dy_ = Upload(dy.data(), dy.size() * 2);
    if (!saved.empty()) saved_ = Upload(saved.data(), saved.size() * 2);
  }
  ~Operands() {
    for (void* b : {dx_, x_, w_, dy_, saved_}) cudaFree(b);
  }

  // dz = act'(saved) * dy in double, from the stored values.
  std::vector<double> Dz() const {
    std::vector<double> dz(dy.size());
    jaxdnn::ByAct(e.act, [&](auto act) {
      constexpr Act A = decltype(act)::value;
      for (size_t i = 0; i < dy.size(); ++i) {
        const float d = HostToF(dy[i], f16);
        dz[i] = saved.empty() ? d : jaxdnn::Backprop<A>(HostToF(saved[i], f16), d, e.act_param);
      }
    });
    return dz;
  }

  // fn(n, output position, input position, tap) for every (output, tap)
  // pair that reads an input (not padding), problem.h's index map.
  template <class Fn>
  void ForEachPair(Fn&& fn) const {
    for (int64_t n = 0; n < g.batch; ++n) {
      for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
          for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
            const int64_t o[3] = {o0, o1, o2};
            const int64_t op = (o0 * g.out[1] + o1) * g.out[2] + o2;
            for (int64_t tap = 0; tap < g.taps(); ++tap) {
              const int64_t j[3] = {tap / (g.window[1] * g.window[2]), (tap / g.window[2]) % g.window[1],
                                    tap % g.window[2]};
              int64_t i[3];
              bool inside = true;
              for (int k = 0; k < 3 && inside; ++k) {
                const int64_t p = o[k] * g.stride[k] - g.pad_lo[k] + j[k] * g.k_dilation[k];
                i[k] = p / g.in_dilation[k];
                inside = p >= 0 && p % g.in_dilation[k] == 0 && i[k] < g.in[k];
              }
              if (inside) fn(n, op, (i[0] * g.in[1] + i[1]) * g.in[2] + i[2], tap);
            }
          }
        }
      }
    }
  }
};

struct Compare {
  double max_err = 0.0, max_ref = 0.0;
  int64_t bad = 0;  // non-finite results (the NaN poison where nothing was written)
  void Add(double got, double want) {
    max_ref = std::max(max_ref, std::fabs(want));
    if (!std::isfinite(got)) {
      ++bad;
      return;
    }
    max_err = std::max(max_err, std::fabs(got - want));
  }
  bool Pass(double rel = 1e-2) const { return bad == 0 && max_err <= rel * std::max(max_ref, 1e-3); }
  std::string Text() const {
    char buf[128];
    std::snprintf(buf, sizeof(buf), "max_err %.3e (max|ref| %.3f)%s", max_err, max_ref,
                  bad ? (" " + std::to_string(bad) + " NaN").c_str() : "");
    return buf;
  }
};

template <class T>
std::vector<T> Download(const void* d, size_t count) {
  std::vector<T> h(count);
  if (count > 0) CHECK_CUDA(cudaMemcpy(h.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

bool CheckDgrad(const Spec& s, Operands& op, const std::vector<double>& dz) {
  const ConvGeometry& g = op.g;
  ConvDgradArgs p;
  p.g = g;
  p.e = op.e;
  p.dtype = op.f16 ? DataType::F16 : DataType::BF16;
  p.dy_dtype = op.dy_dtype;
  p.dy = op.dy_;
  p.w = op.w_;
  p.saved = op.saved_;
  const int64_t dx_count = g.batch * g.in_positions() * g.in_channels;
  void* dx = Alloc(size_t(dx_count) * 2, 0xFF);  // NaN where nothing is written
  void* dres = nullptr;
  if (s.residual) {
    p.residual_dtype = s.residual_dtype;
    dres = Alloc(dz.size() * DtypeBytes(s.residual_dtype), 0xFF);
  }
  p.dx = dx;
  p.dresidual = dres;
  p.workspace_bytes = jaxdnn::conv::ConvDgradSm90Workspace(p);
  p.workspace = Alloc(p.workspace_bytes, 0xFF);
  const char* why = jaxdnn::conv::ConvDgradSm90Refusal(p);
  const jaxdnn::LaunchStatus st = jaxdnn::conv::ConvDgradSm90(p, nullptr);
  bool pass;
  if (!s.expect_dgrad) {
    pass = !st.ok() && why != nullptr;
    std::printf("%-50s dgrad %s  %s\n", s.name.c_str(),
                pass ? ("refused: " + st.Text()).c_str() : "ran, should refuse", pass ? "PASS" : "FAIL");
  } else if (!st.ok() || why != nullptr) {
    std::printf("%-50s dgrad launcher failed: %s  FAIL\n", s.name.c_str(), st.ok() ? why : st.Text().c_str());
    pass = false;
  } else {
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<double> ref(size_t(dx_count), 0.0);
    const int64_t cin = g.in_channels, cout = g.out_channels;
    op.ForEachPair([&](int64_t n, int64_t o, int64_t i, int64_t tap) {
      const double* d = dz.data() + (n * g.out_positions() + o) * cout;
      double* r = ref.data() + (n * g.in_positions() + i) * cin;
      const uint16_t* wt = op.w.data() + tap * cin * cout;
      for (int64_t ci = 0; ci < cin; ++ci) {
        double acc = 0.0;
        for (int64_t co = 0; co < cout; ++co) acc += d[co] * HostToF(wt[ci * cout + co], op.f16);
        r[ci] += acc;
      }
    });
    const auto got = Download<uint16_t>(dx, size_t(dx_count));
    Compare c;
    for (int64_t k = 0; k < dx_count; ++k) c.Add(HostToF(got[size_t(k)], op.f16), s.alpha * ref[size_t(k)]);
    Compare cr;
    if (s.residual) {
      const auto raw = Download<uint8_t>(dres, dz.size() * DtypeBytes(s.residual_dtype));
      for (size_t k = 0; k < dz.size(); ++k)
        cr.Add(ReadAs(raw, s.residual_dtype, int64_t(k)), s.beta * dz[k]);
    }
    pass = c.Pass() && cr.Pass();
    std::printf("%-50s dgrad %s tile %d  dx %s%s  %s\n", s.name.c_str(), op.f16 ? "f16 " : "bf16",
                jaxdnn::conv::ConvDgradSm90TileN(p), c.Text().c_str(),
                s.residual ? ("  dres " + cr.Text()).c_str() : "", pass ? "PASS" : "FAIL");
  }
  for (void* b : {dx, dres, p.workspace}) cudaFree(b);
  return pass;
}

bool CheckWgrad(const Spec& s, Operands& op, const std::vector<double>& dz) {
  const ConvGeometry& g = op.g;
  ConvWgradArgs p;
  p.g = g;
  p.e = op.e;
  p.dtype = op.f16 ? DataType::F16 : DataType::BF16;
  p.dy_dtype = op.dy_dtype;
  p.x = op.x_;
  p.dy = op.dy_;
  p.saved = op.saved_;
  void* dw = Alloc(size_t(g.weights()) * 2, 0xFF);
  void* dbias = nullptr;
  if (s.bias) {
    p.bias_dtype = s.bias_dtype;
    dbias = Alloc(size_t(g.out_channels) * DtypeBytes(s.bias_dtype), 0xFF);
  }
  p.dw = dw;
  p.dbias = dbias;
  p.workspace_bytes = jaxdnn::conv::ConvWgradSm90Workspace(p);
  p.workspace = Alloc(p.workspace_bytes, 0xFF);
  const char* why = jaxdnn::conv::ConvWgradSm90Refusal(p);
  const jaxdnn::LaunchStatus st = jaxdnn::conv::ConvWgradSm90(p, nullptr);
  bool pass;
  if (!s.expect_wgrad) {
    pass = !st.ok() && why != nullptr;
    std::printf("%-50s wgrad %s  %s\n", s.name.c_str(),
                pass ? ("refused: " + st.Text()).c_str() : "ran, should refuse", pass ? "PASS" : "FAIL");
  } else if (!st.ok() || why != nullptr) {
    std::printf("%-50s wgrad launcher failed: %s  FAIL\n", s.name.c_str(), st.ok() ? why : st.Text().c_str());
    pass = false;
  } else {
    CHECK_CUDA(cudaDeviceSynchronize());
    const auto got = Download<uint16_t>(dw, size_t(g.weights()));
    const auto got_bias =
        Download<uint8_t>(dbias, s.bias ? size_t(g.out_channels) * DtypeBytes(s.bias_dtype) : 0);
    // Determinism: a second run gives the same bits.
    CHECK_CUDA(cudaMemset(dw, 0xFF, size_t(g.weights()) * 2));
    const jaxdnn::LaunchStatus again = jaxdnn::conv::ConvWgradSm90(p, nullptr);
    CHECK_CUDA(cudaDeviceSynchronize());
    const bool same = again.ok() && Download<uint16_t>(dw, got.size()) == got &&
                      Download<uint8_t>(dbias, got_bias.size()) == got_bias;
    const int64_t cin = g.in_channels, cout = g.out_channels;
    std::vector<double> ref(size_t(g.weights()), 0.0);
    op.ForEachPair([&](int64_t n, int64_t o, int64_t i, int64_t tap) {
      const double* d = dz.data() + (n * g.out_positions() + o) * cout;
      const uint16_t* xs = op.x.data() + (n * g.in_positions() + i) * cin;
      double* r = ref.data() + tap * cin * cout;
      for (int64_t ci = 0; ci < cin; ++ci) {
        const double xv = HostToF(xs[ci], op.f16);
        for (int64_t co = 0; co < cout; ++co) r[ci * cout + co] += xv * d[co];
      }
    });
    Compare c;
    for (size_t k = 0; k < ref.size(); ++k) c.Add(HostToF(got[k], op.f16), s.alpha * ref[k]);
    Compare cb;
    if (s.bias) {
      std::vector<double> bref(size_t(cout), 0.0);
      for (size_t k = 0; k < dz.size(); ++k) bref[k % size_t(cout)] += dz[k];
      for (int64_t co = 0; co < cout; ++co) cb.Add(ReadAs(got_bias, s.bias_dtype, co), bref[size_t(co)]);
    }
    pass = c.Pass() && cb.Pass() && same;
    std::printf("%-50s wgrad %s tile %d parts %d  dw %s%s%s  %s\n", s.name.c_str(), op.f16 ? "f16 " : "bf16",
                jaxdnn::conv::ConvWgradSm90TileM(p), jaxdnn::conv::ConvWgradSm90Parts(p), c.Text().c_str(),
                s.bias ? ("  dbias " + cb.Text()).c_str() : "", same ? "" : "  NOT DETERMINISTIC",
                pass ? "PASS" : "FAIL");
  }
  for (void* b : {dw, dbias, p.workspace}) cudaFree(b);
  return pass;
}

Spec Conv2d(const char* name, int64_t n, int64_t h, int64_t w, int64_t cin, int64_t cout, int64_t k,
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
}

std::vector<Spec> CheckSpecs() {
  std::vector<Spec> v;
  // ResNet's 3x3 SAME conv, plain and with the whole epilogue's gradients.
  Spec s = Conv2d("2d 3x3 SAME 56x56 64->64 n2", 2, 56, 56, 64, 64, 3, 1, 1, 1);
  v.push_back(s);
  s.name = "  + relu, bias(f32), residual(bf16), a.5 b2";
  s.act = int(Act::kRelu);
  s.bias = s.residual = true;
  s.alpha = 0.5f;
  s.beta = 2.0f;
  v.push_back(s);
  s.name = "  f16 + relu6, bias(bf16), residual(f32)";
  s.f16 = true;
  s.act = int(Act::kRelu6);
  s.bias_dtype = DataType::BF16;
  s.residual_dtype = DataType::F32;
  v.push_back(s);
  // C 128 both ways: the dgrad's 128-wide tile, the wgrad's 128-high one.
  s = Conv2d("2d 3x3 SAME 10x10 128->128 n2 + relu", 2, 10, 10, 128, 128, 3, 1, 1, 1);
  s.act = int(Act::kRelu);
  v.push_back(s);
  // 1x1 with C_in 256.
  s = Conv2d("2d 1x1 28x28 256->128 n2 + bias(f16)", 2, 28, 28, 256, 128, 1, 1, 0, 0);
  s.bias = true;
  s.bias_dtype = DataType::F16;
  v.push_back(s);
  // Several channel blocks plus remainders (136 = 2 * 64 + 8, 200), a saved z.
  s = Conv2d("2d 3x3 VALID 12x12 136->200 n2 + gelu + bias", 2, 12, 12, 136, 200, 3, 1, 0, 0);
  s.act = int(Act::kGeluTanh);
  s.bias = true;
  v.push_back(s);
  // C 256, odd spatial, silu, f16.
  s = Conv2d("2d 3x3 SAME 13x15 256->256 n3 f16 + silu", 3, 13, 15, 256, 256, 3, 1, 1, 1);
  s.f16 = true;
  s.act = int(Act::kSilu);
  v.push_back(s);
  // The smallest aligned C_in and a large window.
  s = Conv2d("2d 7x7 p3 9x13 8->64 n5 + residual", 5, 9, 13, 8, 64, 7, 1, 3, 3);
  s.residual = true;
  s.beta = -1.0f;
  v.push_back(s);
  // Strided: the weight gradient serves it, the data gradient refuses.
  s = Conv2d("2d 3x3 s2 pad 0/1 17x20 24->72 n3 + bias", 3, 17, 20, 24, 72, 3, 2, 0, 1);
  s.bias = true;
  s.expect_dgrad = false;
  v.push_back(s);
  s = Conv2d("2d 1x1 s2 15x15 256->128 n2 (odd)", 2, 15, 15, 256, 128, 1, 2, 0, 0);
  s.expect_dgrad = false;
  v.push_back(s);
  // Several batch parts with a smaller last one (37 = 3 * 10 + 7).
  s = Conv2d("2d 3x3 SAME 16x16 64->64 n37 + relu + bias", 37, 16, 16, 64, 64, 3, 1, 1, 1);
  s.act = int(Act::kRelu);
  s.bias = true;
  v.push_back(s);
  // 3-D.
  s = Spec();
  s.name = "3d 3x3x3 SAME 6x10x12 16->32 n2 + relu + bias";
  s.batch = 2;
  s.cin = 16;
  s.cout = 32;
  s.in = {6, 10, 12};
  s.window = {3, 3, 3};
  s.lo = s.hi = {1, 1, 1};
  s.act = int(Act::kRelu);
  s.bias = true;
  v.push_back(s);
  s.name = "  f16";
  s.f16 = true;
  v.push_back(s);
  s = Spec();
  s.name = "3d 3x3x3 dil(1,2,1) pad(1,2,1) 7x9x11 32->64";
  s.cin = 32;
  s.cout = 64;
  s.in = {7, 9, 11};
  s.window = {3, 3, 3};
  s.kdil = {1, 2, 1};
  s.lo = s.hi = {1, 2, 1};
  s.residual = true;
  s.alpha = 0.5f;
  v.push_back(s);
  s.name = "3d 3x3x3 s2 dil(1,2,1) 9x14x11 32->64";
  s.in = {9, 14, 11};
  s.stride = {2, 2, 2};
  s.lo = {1, 2, 0};
  s.hi = {1, 2, 0};
  s.residual = false;
  s.expect_dgrad = false;
  v.push_back(s);
  // 1-D.
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
  s = Spec();
  s.name = "1d k3 VALID w=301 64->64 n1 + relu";
  s.cin = s.cout = 64;
  s.in = {1, 1, 301};
  s.window = {1, 1, 3};
  s.act = int(Act::kRelu);
  v.push_back(s);
  // What both must refuse.
  auto refuse = [&](Spec r) {
    r.expect_dgrad = r.expect_wgrad = false;
    v.push_back(r);
  };
  s = Conv2d("refuse: C_in 4", 1, 8, 8, 4, 64, 3, 1, 1, 1);
  refuse(s);
  s = Conv2d("refuse: groups 2", 1, 8, 8, 16, 16, 3, 1, 1, 1);
  s.groups = 2;
  refuse(s);
  s = Conv2d("refuse: input dilation 2", 1, 8, 8, 16, 16, 3, 1, 1, 1);
  s.indil = {1, 2, 2};
  refuse(s);
  s = Conv2d("refuse: padding 20 (im2col TMA limit)", 1, 8, 8, 16, 16, 3, 1, 20, 20);
  refuse(s);
  s = Conv2d("refuse: float32 dy with bfloat16 w", 1, 8, 8, 16, 16, 3, 1, 1, 1);
  s.dy_dtype = DataType::F32;
  refuse(s);
  return v;
}

int Check() {
  bool all = true;
  uint64_t seed = 0x9E3779B97F4A7C15ull;
  for (const Spec& s : CheckSpecs()) {
    Operands op(s, seed += 0x1234567ull);
    const std::vector<double> dz = op.Dz();
    all = CheckDgrad(s, op, dz) && all;
    all = CheckWgrad(s, op, dz) && all;
  }
  std::printf(all ? "ALL PASSED\n" : "SOME FAILED\n");
  return all ? 0 : 1;
}

template <class Launch>
double TimeMs(Launch&& launch) {
  for (int i = 0; i < 10; ++i) launch();
  cudaEvent_t t0, t1;
  CHECK_CUDA(cudaEventCreate(&t0));
  CHECK_CUDA(cudaEventCreate(&t1));
  CHECK_CUDA(cudaEventRecord(t0));
  constexpr int kCalls = 50;
  for (int i = 0; i < kCalls; ++i) launch();
  CHECK_CUDA(cudaEventRecord(t1));
  CHECK_CUDA(cudaEventSynchronize(t1));
  float ms = 0.0f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
  CHECK_CUDA(cudaEventDestroy(t0));
  CHECK_CUDA(cudaEventDestroy(t1));
  return ms / kCalls;
}

int Bench() {
  struct Layer {
    const char* name;
    int64_t hw, cin, cout, k, stride;
  };
  const Layer layers[] = {
      {"3x3 56x56 64->64", 56, 64, 64, 3, 1},
      {"3x3 28x28 128->128", 28, 128, 128, 3, 1},
      {"3x3 14x14 256->256", 14, 256, 256, 3, 1},
      {"3x3 7x7 512->512", 7, 512, 512, 3, 1},
      {"1x1 56x56 64->256", 56, 64, 256, 1, 1},
      {"1x1 56x56 256->64", 56, 256, 64, 1, 1},
      {"1x1 7x7 2048->512", 7, 2048, 512, 1, 1},
      {"3x3 s2 28x28 128->128 (dgrad on XLA)", 56, 128, 128, 3, 2},
  };
  for (const Layer& l : layers) {
    const int64_t pad = l.k / 2;
    Spec s = Conv2d(l.name, 128, l.hw, l.hw, l.cin, l.cout, l.k, l.stride, pad, l.stride > 1 ? pad - 1 : pad);
    for (int relu = 0; relu < 2; ++relu) {
      if (relu) {
        s.act = int(Act::kRelu);
        s.bias = true;
      }
      Operands op(s, 42);
      const ConvGeometry& g = op.g;
      const double flop = 2.0 * g.batch * g.out_positions() * g.out_channels * g.taps() * g.in_channels;
      ConvDgradArgs d;
      d.g = g;
      d.e = op.e;
      d.dtype = d.dy_dtype = DataType::BF16;
      d.dy = op.dy_;
      d.w = op.w_;
      d.saved = op.saved_;
      d.dx = Alloc(size_t(g.batch * g.in_positions() * g.in_channels) * 2, 0);
      d.workspace_bytes = jaxdnn::conv::ConvDgradSm90Workspace(d);
      d.workspace = Alloc(d.workspace_bytes, 0);
      ConvWgradArgs w;
      w.g = g;
      w.e = op.e;
      w.dtype = w.dy_dtype = DataType::BF16;
      w.x = op.x_;
      w.dy = op.dy_;
      w.saved = op.saved_;
      w.dw = Alloc(size_t(g.weights()) * 2, 0);
      w.bias_dtype = DataType::F32;
      w.dbias = s.bias ? Alloc(size_t(g.out_channels) * 4, 0) : nullptr;
      w.workspace_bytes = jaxdnn::conv::ConvWgradSm90Workspace(w);
      w.workspace = Alloc(w.workspace_bytes, 0);
      const char* label = relu ? "+ relu (+ dbias)" : "";
      if (const char* why = jaxdnn::conv::ConvDgradSm90Refusal(d)) {
        std::printf("bench n128 %-38s %-16s dgrad refused: %s\n", l.name, label, why);
      } else {
        const double ms = TimeMs([&] {
          const jaxdnn::LaunchStatus st = jaxdnn::conv::ConvDgradSm90(d, nullptr);
          if (!st.ok()) {
            std::fprintf(stderr, "dgrad failed: %s\n", st.Text().c_str());
            std::exit(2);
          }
        });
        std::printf("bench n128 %-38s %-16s dgrad tile %3d          %.4f ms  %6.1f TFLOP/s\n", l.name, label,
                    jaxdnn::conv::ConvDgradSm90TileN(d), ms, flop / (ms * 1e-3) / 1e12);
      }
      if (const char* why = jaxdnn::conv::ConvWgradSm90Refusal(w)) {
        std::printf("bench n128 %-38s %-16s wgrad refused: %s\n", l.name, label, why);
      } else {
        const double ms = TimeMs([&] {
          const jaxdnn::LaunchStatus st = jaxdnn::conv::ConvWgradSm90(w, nullptr);
          if (!st.ok()) {
            std::fprintf(stderr, "wgrad failed: %s\n", st.Text().c_str());
            std::exit(2);
          }
        });
        std::printf("bench n128 %-38s %-16s wgrad tile %3d parts %2d %.4f ms  %6.1f TFLOP/s\n", l.name, label,
                    jaxdnn::conv::ConvWgradSm90TileM(w), jaxdnn::conv::ConvWgradSm90Parts(w), ms,
                    flop / (ms * 1e-3) / 1e12);
      }
      CHECK_CUDA(cudaDeviceSynchronize());
      for (void* b : {d.dx, d.workspace, w.dw, w.dbias, w.workspace}) cudaFree(b);
    }
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
