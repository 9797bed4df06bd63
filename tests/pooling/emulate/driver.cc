// Runs pool.cu's launchers on the host (cuda_emu.h) against the CPU kernels
// (pool_kernels.cc) on random geometries.
#include "cuda_emu.h"
#include "pool_emu.inc"
#include "pooling/cpu/pool_kernels.h"
#include "common/cpu_dispatch.h"

#include <cstdio>
#include <cstring>
#include <random>

using namespace jaxdnn;
using namespace jaxdnn::pooling;

static std::mt19937_64 rng(12345);
static int64_t R(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

static float ElemToFloat(const void* p, ffi::DataType t, int64_t i) { return LoadAsFloat(p, t, i); }

static bool SameMax(float a, float b) { return (a != a && b != b) || a == b; }

struct Stats {
  long cases = 0, fails = 0;
} stats;

static bool Check(bool ok, const char* what, const PoolGeometry& g, ffi::DataType t) {
  if (!ok) {
    ++stats.fails;
    if (stats.fails < 30) {
      printf("FAIL %s: dtype %d batch %ld C %ld max %d cip %d adaptive %d\n", what, int(t), long(g.batch),
             long(g.channels), g.max, g.count_include_pad, g.adaptive);
      for (int k = 0; k < 3; ++k)
        printf("   in %ld out %ld win %ld stride %ld dil %ld pad %ld\n", long(g.in[k]), long(g.out[k]),
               long(g.window[k]), long(g.stride[k]), long(g.dilation[k]), long(g.pad_lo[k]));
    }
  }
  return ok;
}

static void RunCase(PoolGeometry g, ffi::DataType t, bool global_like) {
  ++stats.cases;
  const int item = t == ffi::DataType::F32 ? 4 : 2;
  const int64_t nin = g.batch * g.in_positions() * g.channels,
                nout = g.batch * g.out_positions() * g.channels;
  std::vector<unsigned char> x(nin * item + 16), y_cpu(nout * item + 16), y_gpu(nout * item + 16),
      y_gpu2(nout * item + 16);
  std::vector<int32_t> idx_cpu(nout + 4), idx_gpu(nout + 4);
  const bool ties = R(0, 1);
  for (int64_t i = 0; i < nin; ++i) {
    float v = ties ? float(R(-3, 3)) : std::normal_distribution<float>(0, 1)(rng);
    if (g.max && R(0, 200) == 0) v = NAN;
    if (g.max && R(0, 200) == 0) v = -INFINITY;
    StoreFromFloat(x.data(), t, i, v);
  }
  PoolFwdArgs f;
  f.g = g;
  f.dtype = t;
  f.x = x.data();
  f.y = y_cpu.data();
  f.index = g.max ? idx_cpu.data() : nullptr;
  if (PoolFwdCpu(f, nullptr).failure()) {
    printf("cpu failed\n");
    return;
  }
  for (int with_index = 0; with_index <= (g.max ? 1 : 0); ++with_index) {
    PoolFwdArgs d = f;
    d.y = y_gpu.data();
    d.index = with_index ? idx_gpu.data() : nullptr;
    std::fill(y_gpu.begin(), y_gpu.end(), 0xcd);
    std::fill(idx_gpu.begin(), idx_gpu.end(), 0x7eadbeef);
    LaunchStatus s = PoolFwdCuda(d, nullptr);
    if (!Check(s.ok(), "fwd launch", g, t)) return;
    bool ok = true;
    for (int64_t i = 0; i < nout && ok; ++i) {
      const float a = ElemToFloat(y_cpu.data(), t, i), b = ElemToFloat(y_gpu.data(), t, i);
      if (g.max) {
        ok = SameMax(a, b);
      } else if (global_like) {
        ok = std::fabs(a - b) <= 1e-5f * (1 + std::fabs(a)) ||
             (t != ffi::DataType::F32 && std::fabs(a - b) <= 1e-2f * (1 + std::fabs(a)));
      } else {
        ok = memcmp(y_cpu.data() + i * item, y_gpu.data() + i * item, item) == 0 || (a != a && b != b);
      }
      if (!ok) printf("  y[%ld] cpu %g gpu %g (with_index %d)\n", long(i), a, b, with_index);
    }
    if (with_index) {
      for (int64_t i = 0; i < nout && ok; ++i) {
        ok = idx_cpu[i] == idx_gpu[i];
        if (!ok) printf("  index[%ld] cpu %d gpu %d\n", long(i), idx_cpu[i], idx_gpu[i]);
      }
    }
    // Nothing past the outputs written.
    for (int64_t i = nout * item; i < int64_t(y_gpu.size()) && ok; ++i) ok = y_gpu[i] == 0xcd;
    Check(ok, with_index ? "fwd (index)" : "fwd", g, t);
  }
  // Backward.
  std::vector<unsigned char> dy(nout * item + 16), dx_cpu(nin * item + 16), dx_gpu(nin * item + 16);
  for (int64_t i = 0; i < nout; ++i)
    StoreFromFloat(dy.data(), t, i, std::normal_distribution<float>(0, 1)(rng));
  PoolBwdArgs b;
  b.g = g;
  b.dtype = t;
  b.dy = dy.data();
  b.index = g.max ? idx_cpu.data() : nullptr;
  b.dx = dx_cpu.data();
  if (PoolBwdCpu(b, nullptr).failure()) {
    printf("cpu bwd failed\n");
    return;
  }
  b.dx = dx_gpu.data();
  std::fill(dx_gpu.begin(), dx_gpu.end(), 0xcd);
  LaunchStatus s = PoolBwdCuda(b, nullptr);
  if (!Check(s.ok(), "bwd launch", g, t)) return;
  bool ok = true;
  for (int64_t i = 0; i < nin && ok; ++i) {
    ok = memcmp(dx_cpu.data() + i * item, dx_gpu.data() + i * item, item) == 0;
    if (!ok)
      printf("  dx[%ld] cpu %g gpu %g\n", long(i), ElemToFloat(dx_cpu.data(), t, i),
             ElemToFloat(dx_gpu.data(), t, i));
  }
  for (int64_t i = nin * item; i < int64_t(dx_gpu.size()) && ok; ++i) ok = dx_gpu[i] == 0xcd;
  Check(ok, "bwd", g, t);
}

static int64_t max_in = 9;
static PoolGeometry RandomGeometry(bool max, bool adaptive, int* global_like) {
  PoolGeometry g;
  g.batch = R(1, 3);
  const int64_t cs[] = {1, 2, 3, 4, 5, 8, 12, 16, 24, 13, 40, 64, 72};
  g.channels = cs[R(0, 12)];
  g.max = max;
  g.adaptive = adaptive;
  g.count_include_pad = adaptive ? false : R(0, 1);
  const int dims = int(R(1, 3));
  *global_like = 0;
  const bool global = !max && R(0, 4) == 0;
  for (int k = 0; k < 3; ++k) {
    if (k < 3 - dims) continue;
    g.in[k] = R(1, max_in);
    if (adaptive) {
      g.out[k] = global ? 1 : R(1, g.in[k] + 2);
      int64_t w = 0;
      for (int64_t o = 0; o < g.out[k]; ++o)
        w = std::max(w, ((o + 1) * g.in[k] + g.out[k] - 1) / g.out[k] - (o * g.in[k]) / g.out[k]);
      g.window[k] = w;
      continue;
    }
    if (global) {
      g.window[k] = g.in[k];
      g.stride[k] = R(1, 3);
      g.out[k] = 1;
      continue;
    }
    g.window[k] = R(1, 4);
    g.stride[k] = R(1, 3);
    g.dilation[k] = max ? R(1, 2) : 1;
    const int64_t span = (g.window[k] - 1) * g.dilation[k] + 1;
    g.pad_lo[k] = R(0, span - 1);
    const int64_t pad_hi = R(0, span - 1);
    const int64_t total = g.in[k] + g.pad_lo[k] + pad_hi;
    g.out[k] = total >= span ? (total - span) / g.stride[k] + 1 : 0;
  }
  *global_like = !max && g.out_positions() == 1 && g.in_positions() > 1;
  return g;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 300;
  if (argc > 2) max_in = atoi(argv[2]);
  const ffi::DataType types[] = {ffi::DataType::F32, ffi::DataType::BF16, ffi::DataType::F16};
  for (int it = 0; it < n; ++it) {
    const bool max = R(0, 1), adaptive = R(0, 3) == 0;
    int global_like = 0;
    PoolGeometry g = RandomGeometry(max, adaptive, &global_like);
    if (g.out_positions() == 0) continue;
    RunCase(g, types[R(0, 2)], global_like);
  }
  // Shapes whose grids need several passes (the pair walk's carries).
  for (int it = 0; it < 3; ++it) {
    PoolGeometry g;
    g.batch = 3;
    g.channels = 8;
    g.max = it != 1;
    g.in = {1, 61, 67};
    g.window = {1, 3, 3};
    g.stride = {1, 2, 2};
    g.pad_lo = {0, 1, 1};
    g.out = {1, 31, 34};
    RunCase(g, ffi::DataType::BF16, false);
  }
  printf("%ld cases, %ld failures, %ld launches\n", stats.cases, stats.fails, emu::launches);
  return stats.fails != 0;
}
