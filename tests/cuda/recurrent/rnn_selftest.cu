// Self-test of the persistent CUDA recurrences (cpp/recurrent/sm80) against
// the C++ CPU kernels (cpp/recurrent/cpu), which the Python tests check
// against the lax.scan oracle: every mode, weights in float32 and bfloat16,
// hidden sizes whose slices are resident and ones that stream, batch tiles
// past one, per-example lengths 0, 1, mid and full, zero steps; and a
// second run bitwise equal to the first (the reductions' order is fixed).
//   rnn_selftest check | bench
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../common/selftest_util.cuh"
#include "recurrent/cpu/rnn_kernels.h"
#include "recurrent/sm80/rnn_launch.h"

using namespace jaxdnn::recurrent;
using sm90_selftest::NextInt;
using sm90_selftest::NextUniform;

namespace {

struct Case {
  RnnMode mode;
  int64_t steps, batch, hidden;
  WeightDtype wd;
};

const char* ModeName(RnnMode m) {
  return m == RnnMode::kLstm ? "lstm" : m == RnnMode::kGru ? "gru" : m == RnnMode::kTanh ? "tanh" : "relu";
}

std::vector<float> Random(size_t n, float scale) {
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = NextUniform() * scale;
    while (x == 0.0f);
  }
  return v;
}

// Device copies of host vectors, freed at the end of a case.
struct Device {
  std::vector<void*> owned;
  template <typename T>
  T* Put(const std::vector<T>& h) {
    void* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(1, h.size() * sizeof(T))));
    if (!h.empty()) CHECK_CUDA(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    owned.push_back(p);
    return static_cast<T*>(p);
  }
  float* Zeros(size_t n) { return Put(std::vector<float>(n, 0.0f)); }
  void* Bytes(int64_t n) {
    void* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, size_t(std::max<int64_t>(n, 1))));
    CHECK_CUDA(cudaMemset(p, 0xFF, size_t(std::max<int64_t>(n, 1))));  // NaN-looking garbage
    owned.push_back(p);
    return p;
  }
  ~Device() {
    for (void* p : owned) cudaFree(p);
  }
};

std::vector<float> Get(const float* d, size_t n) {
  std::vector<float> h(n);
  if (n) CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

// Largest |got - want| / (atol + rtol |want|); > 1 fails. NaN fails.
double Worst(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol) {
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::fabs(double(got[i]) - want[i]) / (atol + rtol * std::fabs(want[i]));
    if (!(e <= worst)) worst = std::isnan(e) ? 1e30 : e;
  }
  return worst;
}

RnnDevice ThisDevice() {
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  RnnDevice dev;
  CHECK_CUDA(RnnDeviceOf(device, &dev));
  return dev;
}

bool RunCase(const Case& c, const RnnDevice& dev) {
  const int64_t T = c.steps, B = c.batch, H = c.hidden, G = GatesOf(c.mode), GH = G * H;
  const int64_t S = SavedPerHidden(c.mode) * H;
  const bool lstm = c.mode == RnnMode::kLstm;
  const int64_t CH = lstm ? B * H : 0, CS = lstm ? T * B * H : 0;
  const float wscale = 1.0f / std::sqrt(float(H));
  auto gx = Random(T * B * GH, 1.0f), w = Random(H * GH, wscale), bias = Random(GH, 0.5f);
  auto h0 = Random(B * H, 0.5f), c0 = Random(CH, 0.5f);
  std::vector<int32_t> len(B);
  for (int64_t b = 0; b < B; ++b) {
    const int pick = int(b % 4);
    len[b] = pick == 0   ? int32_t(T)
             : pick == 1 ? 0
             : pick == 2 ? int32_t(std::min<int64_t>(1, T))
                         : NextInt(0, int(T));
  }
  if (B == 1) len[0] = int32_t(T);
  // The CPU reference.
  std::vector<float> out(T * B * H), hn(B * H), cn(CH), saved(T * B * S), cseq(CS);
  RnnFwdCpu(RnnFwdArgs{c.mode,
                       {T, B, H},
                       gx.data(),
                       w.data(),
                       bias.data(),
                       h0.data(),
                       c0.data(),
                       len.data(),
                       out.data(),
                       hn.data(),
                       cn.data(),
                       saved.data(),
                       cseq.data()});
  auto dout = Random(T * B * H, 1.0f), dhn = Random(B * H, 1.0f), dcn = Random(CH, 1.0f);
  std::vector<float> dgx(T * B * GH), dh0(B * H), dc0(CH);
  RnnBwdCpu(RnnBwdArgs{c.mode,
                       {T, B, H},
                       dout.data(),
                       dhn.data(),
                       dcn.data(),
                       w.data(),
                       h0.data(),
                       c0.data(),
                       len.data(),
                       out.data(),
                       saved.data(),
                       cseq.data(),
                       dgx.data(),
                       dh0.data(),
                       dc0.data()});

  Device d;
  const RnnCudaPlan fplan = MakeRnnPlan(false, c.mode, {T, B, H}, c.wd, dev);
  const RnnCudaPlan bplan = MakeRnnPlan(true, c.mode, {T, B, H}, c.wd, dev);
  if (T > 0 && (!fplan.ok || !bplan.ok)) {
    std::printf("FAIL %s T=%lld B=%lld H=%lld: no plan (%s)\n", ModeName(c.mode), (long long)T, (long long)B,
                (long long)H, fplan.ok ? bplan.why : fplan.why);
    return false;
  }
  float *g_gx = d.Put(gx), *g_w = d.Put(w), *g_b = d.Put(bias), *g_h0 = d.Put(h0), *g_c0 = d.Put(c0);
  int32_t* g_len = d.Put(len);
  float *g_out = d.Zeros(out.size()), *g_hn = d.Zeros(hn.size()), *g_cn = d.Zeros(CH);
  float *g_saved = d.Zeros(saved.size()), *g_cseq = d.Zeros(CS);
  void* fws = d.Bytes(fplan.ws_bytes);
  RnnFwdArgs fa{c.mode, {T, B, H}, g_gx, g_w, g_b, g_h0, g_c0, g_len, g_out, g_hn, g_cn, g_saved, g_cseq};
  CHECK_CUDA(RnnFwdCuda(fa, c.wd, dev, fws, fplan.ws_bytes, 0));
  CHECK_CUDA(cudaDeviceSynchronize());
  // The gradient from the CPU's forward results, so both backwards see the
  // same saved values.
  float *g_dout = d.Put(dout), *g_dhn = d.Put(dhn), *g_dcn = d.Put(dcn);
  float *r_out = d.Put(out), *r_saved = d.Put(saved), *r_cseq = d.Put(cseq);
  float *g_dgx = d.Zeros(dgx.size()), *g_dh0 = d.Zeros(dh0.size()), *g_dc0 = d.Zeros(CH);
  void* bws = d.Bytes(bplan.ws_bytes);
  RnnBwdArgs ba{c.mode, {T, B, H}, g_dout,  g_dhn,  g_dcn, g_w,   g_h0, g_c0,
                g_len,  r_out,     r_saved, r_cseq, g_dgx, g_dh0, g_dc0};
  CHECK_CUDA(RnnBwdCuda(ba, c.wd, dev, bws, bplan.ws_bytes, 0));
  CHECK_CUDA(cudaDeviceSynchronize());

  // float32 weights: the same float32 math in another order (and the
  // build's fast exp/tanh); bfloat16 weights: their rounding on top.
  const bool f32 = c.wd == WeightDtype::kF32;
  const double atol = f32 ? 2e-4 : 3e-2, rtol = f32 ? 2e-3 : 5e-2;
  struct Cmp {
    const char* name;
    std::vector<float> got, want;
  };
  std::vector<Cmp> cmps = {{"out", Get(g_out, out.size()), out}, {"h_n", Get(g_hn, hn.size()), hn},
                           {"c_n", Get(g_cn, CH), cn},           {"saved", Get(g_saved, saved.size()), saved},
                           {"c_seq", Get(g_cseq, CS), cseq},     {"dgx", Get(g_dgx, dgx.size()), dgx},
                           {"dh0", Get(g_dh0, dh0.size()), dh0}, {"dc0", Get(g_dc0, CH), dc0}};
  bool ok = true;
  std::string worst_name;
  double worst = 0.0;
  for (auto& m : cmps) {
    const double e = Worst(m.got, m.want, atol, rtol);
    if (e > worst) worst = e, worst_name = m.name;
  }
  ok = worst <= 1.0;
  // Bitwise repeatable: a second forward and backward.
  const auto out1 = cmps[0].got, dgx1 = cmps[5].got;
  CHECK_CUDA(RnnFwdCuda(fa, c.wd, dev, fws, fplan.ws_bytes, 0));
  CHECK_CUDA(RnnBwdCuda(ba, c.wd, dev, bws, bplan.ws_bytes, 0));
  CHECK_CUDA(cudaDeviceSynchronize());
  const bool same = Get(g_out, out.size()) == out1 && Get(g_dgx, dgx.size()) == dgx1;
  ok = ok && same;
  std::printf(
      "%s %-4s T=%lld B=%lld H=%lld w=%s ctas=%lld units=%lld groups=%lld/%lld tile=%lld resident=%d/%d "
      "mma=%d/%d: worst %.3g (%s)%s\n",
      ok ? "ok  " : "FAIL", ModeName(c.mode), (long long)T, (long long)B, (long long)H, f32 ? "f32" : "bf16",
      (long long)fplan.ctas, (long long)fplan.units, (long long)fplan.batch_groups,
      (long long)bplan.batch_groups, (long long)fplan.batch_tile, int(fplan.resident), int(bplan.resident),
      int(fplan.mma), int(bplan.mma), worst, worst_name.c_str(), same ? "" : " NOT REPEATABLE");
  return ok;
}

int Check() {
  const RnnDevice dev = ThisDevice();
  std::printf("device: %lld SMs, %lld bytes of shared memory a CTA\n", (long long)dev.sms,
              (long long)dev.smem_optin);
  int failed = 0, n = 0;
  const RnnMode modes[] = {RnnMode::kLstm, RnnMode::kGru, RnnMode::kTanh, RnnMode::kRelu};
  const int64_t shapes[][3] = {{5, 3, 17}, {7, 1, 1}, {4, 11, 256}, {3, 2, 1024}, {6, 5, 33}, {0, 3, 8}};
  for (RnnMode m : modes) {
    for (auto& s : shapes) {
      for (WeightDtype wd : {WeightDtype::kF32, WeightDtype::kBf16}) {
        ++n;
        failed += RunCase(Case{m, s[0], s[1], s[2], wd}, dev) ? 0 : 1;
      }
    }
  }
  // Slices that stream from L2 (not resident) and a wide batch.
  for (RnnMode m : {RnnMode::kLstm, RnnMode::kGru}) {
    ++n;
    failed += RunCase(Case{m, 3, 2, 2048, WeightDtype::kBf16}, dev) ? 0 : 1;
    ++n;
    failed += RunCase(Case{m, 3, 3, 2048, WeightDtype::kF32}, dev) ? 0 : 1;
    ++n;
    failed += RunCase(Case{m, 4, 37, 64, WeightDtype::kF32}, dev) ? 0 : 1;
    // Tensor-core tiles of 64 rows, a second partial one, a 32-row one.
    ++n;
    failed += RunCase(Case{m, 3, 70, 64, WeightDtype::kBf16}, dev) ? 0 : 1;
    ++n;
    failed += RunCase(Case{m, 3, 37, 1024, WeightDtype::kBf16}, dev) ? 0 : 1;
    ++n;
    failed += RunCase(Case{m, 2, 20, 200, WeightDtype::kBf16}, dev) ? 0 : 1;
    // Two batch groups (batch >= 32, hidden >= 512): uneven groups and a
    // last unit block of fewer units.
    ++n;
    failed += RunCase(Case{m, 3, 33, 520, WeightDtype::kBf16}, dev) ? 0 : 1;
    ++n;
    failed += RunCase(Case{m, 2, 64, 1024, WeightDtype::kBf16}, dev) ? 0 : 1;
  }
  std::printf("%d of %d cases passed\n", n - failed, n);
  if (failed == 0) std::printf("ALL PASSED\n");
  return failed == 0 ? 0 : 1;
}

// Per-step times of the issue's shapes (forward, backward), CUDA events;
// `bench MODE B H` times that one shape (for a profiler run).
int Bench(const char* only_mode, int64_t only_b, int64_t only_h) {
  const RnnDevice dev = ThisDevice();
  const int64_t shapes[][3] = {{256, 1, 1024},   {256, 8, 1024}, {256, 64, 1024},
                               {256, 256, 1024}, {256, 8, 256},  {256, 64, 2048}};
  for (RnnMode m : {RnnMode::kLstm, RnnMode::kGru}) {
    for (auto& s : shapes) {
      if (only_mode != nullptr && (std::string(only_mode) != ModeName(m) || s[1] != only_b || s[2] != only_h))
        continue;
      const int64_t T = s[0], B = s[1], H = s[2], GH = GatesOf(m) * H, S = SavedPerHidden(m) * H;
      const bool lstm = m == RnnMode::kLstm;
      const WeightDtype wd = WeightDtype::kBf16;
      const RnnCudaPlan fp = MakeRnnPlan(false, m, {T, B, H}, wd, dev),
                        bp = MakeRnnPlan(true, m, {T, B, H}, wd, dev);
      Device d;
      auto gx = d.Put(Random(T * B * GH, 1.0f)), w = d.Put(Random(H * GH, 0.03f)), bias = d.Zeros(GH);
      auto h0 = d.Zeros(B * H), c0 = d.Zeros(lstm ? B * H : 0);
      auto len = d.Put(std::vector<int32_t>(B, int32_t(T)));
      auto out = d.Zeros(T * B * H), hn = d.Zeros(B * H), cn = d.Zeros(lstm ? B * H : 0);
      auto saved = d.Zeros(T * B * S), cseq = d.Zeros(lstm ? T * B * H : 0), dgx = d.Zeros(T * B * GH);
      auto dh0 = d.Zeros(B * H), dc0 = d.Zeros(lstm ? B * H : 0);
      void* fws = d.Bytes(fp.ws_bytes);
      void* bws = d.Bytes(bp.ws_bytes);
      RnnFwdArgs fa{m, {T, B, H}, gx, w, bias, h0, c0, len, out, hn, cn, saved, cseq};
      RnnBwdArgs ba{m, {T, B, H}, out, hn, cn, w, h0, c0, len, out, saved, cseq, dgx, dh0, dc0};
      cudaEvent_t e0, e1, e2;
      CHECK_CUDA(cudaEventCreate(&e0));
      CHECK_CUDA(cudaEventCreate(&e1));
      CHECK_CUDA(cudaEventCreate(&e2));
      for (int warm = 0; warm < 2; ++warm) {
        CHECK_CUDA(RnnFwdCuda(fa, wd, dev, fws, fp.ws_bytes, 0));
        CHECK_CUDA(RnnBwdCuda(ba, wd, dev, bws, bp.ws_bytes, 0));
      }
      const int reps = 5;
      CHECK_CUDA(cudaEventRecord(e0));
      for (int r = 0; r < reps; ++r) CHECK_CUDA(RnnFwdCuda(fa, wd, dev, fws, fp.ws_bytes, 0));
      CHECK_CUDA(cudaEventRecord(e1));
      for (int r = 0; r < reps; ++r) CHECK_CUDA(RnnBwdCuda(ba, wd, dev, bws, bp.ws_bytes, 0));
      CHECK_CUDA(cudaEventRecord(e2));
      CHECK_CUDA(cudaEventSynchronize(e2));
      float fms = 0, bms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&fms, e0, e1));
      CHECK_CUDA(cudaEventElapsedTime(&bms, e1, e2));
      std::printf(
          "bench %-4s T=%lld B=%lld H=%lld bf16: fwd %.3f ms (%.2f us/step, ctas %lld resident %d mma %d "
          "tile %lld groups %lld), "
          "bwd %.3f ms (%.2f us/step, ctas %lld resident %d mma %d tile %lld groups %lld)\n",
          ModeName(m), (long long)T, (long long)B, (long long)H, fms / reps, 1000.0 * fms / reps / T,
          (long long)fp.ctas, int(fp.resident), int(fp.mma), (long long)fp.batch_tile,
          (long long)fp.batch_groups, bms / reps, 1000.0 * bms / reps / T, (long long)bp.ctas,
          int(bp.resident), int(bp.mma), (long long)bp.batch_tile, (long long)bp.batch_groups);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  if (mode == "bench" && argc > 4) return Bench(argv[2], std::atoll(argv[3]), std::atoll(argv[4]));
  if (mode == "bench") return Bench(nullptr, 0, 0);
  return Check();
}
