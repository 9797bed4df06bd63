// The depthwise forward's tiled kernel: a CTA copies the input patch of a
// tile of output rows x columns for up to 128 bytes of channels into shared
// memory once (cp.async, zeros for padding), then each thread sums the
// window over that patch for four neighbouring outputs of one channel
// vector, the weights' vector reused across the four. A CTA pipelines a few
// tiles, the next patch in flight while the current one is summed. The
// direct loop it replaces read every tap through L1/L2 and spent most of
// its time on index arithmetic (0.57 TB/s on an H200; docs/perf/conv.md).
//
// Kernel dilation at full speed: outputs of a tile step by q = d / gcd(d, s)
// (one phase of the output grid), so the taps of neighbouring outputs land
// on neighbouring patch pixels and the patch holds every d-th input only:
// (t - 1) * s / gcd(d, s) + window pixels a dim, whatever the dilation.
// Depth (3D) is summed by restaging the patch of each input slice a tap
// reads. Input dilation (transposed convolutions) stays on the direct loop.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "common/row_col.cuh"
#include "common/sm80/cp_async.cuh"
#include "conv/sm80/depthwise_common.cuh"

namespace jaxdnn::conv {

// A tile plan: tile th x tw outputs (each a phase of step q); the patch of
// halo[1] x halo[2] pixels; cvb channel vectors a CTA; tiles[k] tiles along
// H and W (all phases). th * tw / 4 * cvb <= kDwThreads.
struct DwTile {
  int th = 0, tw = 0, cvb = 0, cvb_log2 = 0, per_cta = 1;
  int64_t tiles_total = 0;
  int q[3] = {1, 1, 1}, se[3] = {1, 1, 1}, halo[3] = {1, 1, 1}, tiles[3] = {1, 1, 1};
  int64_t grid_x = 0, grid_y = 0;
  size_t smem = 0;
  bool ok() const { return th > 0; }
};

constexpr int kDwThreads = 256;
constexpr int kDwStrip = 4;                 // outputs a thread along W
constexpr size_t kDwStageSmem = 48 * 1024;  // a pipeline stage's patch (two stages a CTA)

// The tile that moves the fewest patch pixels plus computed outputs, or
// none (!ok()) where the direct loop must serve: input dilation, or a patch
// over 48 KiB at every tile shape.
inline DwTile ChooseDwTile(const DwParams& p) {
  DwTile best;
  for (int k = 0; k < 3; ++k)
    if (p.in_dil[k] != 1) return best;
  const int cvb = p.cvecs >= 8 ? 8 : p.cvecs >= 4 ? 4 : p.cvecs >= 2 ? 2 : 1;
  const int slots = kDwThreads / cvb;
  int64_t best_cost = -1;
  // Tiles of 4 * slots outputs, or fewer (threads left idle) where a full
  // one's patch does not fit: th x tw over powers of two.
  for (int outputs = kDwStrip * slots; outputs >= kDwStrip; outputs /= 2)
    for (int th = 1; th <= outputs / kDwStrip; th *= 2) {
      const int tw = outputs / th;
      DwTile t;
      t.th = th;
      t.tw = tw;
      t.cvb = cvb;
      const int extent[3] = {1, th, tw};
      int64_t tiles = 1;
      for (int k = 1; k < 3; ++k) {
        const int g = std::gcd(p.k_dil[k], p.stride[k]);
        t.q[k] = p.k_dil[k] / g;
        t.se[k] = p.stride[k] / g;
        t.halo[k] = (extent[k] - 1) * t.se[k] + p.window[k];
        const int per_phase = (p.out[k] + t.q[k] - 1) / t.q[k];
        t.tiles[k] = t.q[k] * ((per_phase + extent[k] - 1) / extent[k]);
        tiles *= t.tiles[k];
      }
      t.smem = 2 * size_t(t.halo[1]) * t.halo[2] * cvb * 16;
      if (t.smem > 2 * kDwStageSmem) continue;
      const int64_t cost = tiles * (int64_t(t.halo[1]) * t.halo[2] * p.window[0] + kDwStrip * slots);
      if (best_cost < 0 || cost < best_cost) {
        t.tiles_total =
            int64_t(p.total / p.cvecs / (int64_t(p.out[0]) * p.out[1] * p.out[2])) * p.out[0] * tiles;
        t.grid_y = (p.cvecs + cvb - 1) / cvb;
        best = t;
        best_cost = cost;
      }
    }
  if (best.ok()) {
    while ((1 << best.cvb_log2) < best.cvb) ++best.cvb_log2;
    // Tiles a CTA pipelines: more where the grid stays several waves deep.
    const int64_t ctas = best.tiles_total * best.grid_y;
    best.per_cta = ctas >= 16384 ? 4 : ctas >= 8192 ? 2 : 1;
    best.grid_x = (best.tiles_total + best.per_cta - 1) / best.per_cta;
  }
  return best;
}

// Where a tile starts: its image and output depth, first output row and
// column (phase + q * tile index * extent), and the patch's input corner.
struct DwTileAt {
  int64_t n;
  int od, oh0, ow0, ih0, iw0;
};

__device__ __forceinline__ DwTileAt TileAt(const DwParams& p, const DwTile& t, int64_t tile) {
  DwTileAt at;
  const int tile_w = int(tile % t.tiles[2]);
  tile /= t.tiles[2];
  const int tile_h = int(tile % t.tiles[1]);
  tile /= t.tiles[1];
  at.od = int(tile % p.out[0]);
  at.n = tile / p.out[0];
  at.oh0 = tile_h % t.q[1] + t.q[1] * (tile_h / t.q[1] * t.th);
  at.ow0 = tile_w % t.q[2] + t.q[2] * (tile_w / t.q[2] * t.tw);
  at.ih0 = at.oh0 * p.stride[1] - p.pad_lo[1];
  at.iw0 = at.ow0 * p.stride[2] - p.pad_lo[2];
  return at;
}

// Starts the copies of the patch of input slice kd of tile `at` into buf
// ([halo H][halo W][cvb] 16-byte vectors, zeros outside the input); false,
// and nothing copied, where that slice lies outside the input.
template <typename T>
__device__ __forceinline__ bool IssuePatch(const DwParams& p, const DwTile& t, const DwTileAt& at, int kd,
                                           int cv0, uint4* buf) {
  constexpr int E = Vec16<T>::kElems;
  const int id = at.od * p.stride[0] - p.pad_lo[0] + kd * p.k_dil[0];
  if (id < 0 || id >= p.in[0]) return false;
  const T* slice =
      static_cast<const T*>(p.x) + (at.n * p.in[0] + id) * int64_t(p.in[1]) * p.in[2] * p.channels;
  ForRowsCols(t.halo[1], t.halo[2] * t.cvb, [&](int i, int hh, int col) {
    const int ww = col >> t.cvb_log2, pv = col & (t.cvb - 1);
    const int ih = at.ih0 + p.k_dil[1] * hh, iw = at.iw0 + p.k_dil[2] * ww;
    const bool in = ih >= 0 && ih < p.in[1] && iw >= 0 && iw < p.in[2] && cv0 + pv < p.cvecs;
    const T* from = in ? slice + (int64_t(ih) * p.in[2] + iw) * p.channels + int64_t(cv0 + pv) * E : slice;
    CpAsync16(buf + i, from, in ? 16 : 0);
  });
  return true;
}

// A thread's place in the tiled kernels: channel vector v of the CTA's block
// (from cv0), tile row r and the first of its kDwStrip columns c; Row and
// Active say where that falls in tile `at` and whether it has outputs there.
struct DwThread {
  int cv0, v, r, c;
  bool has_outputs;
  __device__ __forceinline__ DwThread(const DwParams& p, const DwTile& t) {
    const int slot = int(threadIdx.x) >> t.cvb_log2, strips = t.tw / kDwStrip;
    cv0 = int(blockIdx.y) * t.cvb;
    v = int(threadIdx.x) & (t.cvb - 1);
    r = slot / strips;
    c = slot % strips * kDwStrip;
    has_outputs = r < t.th && cv0 + v < p.cvecs;
  }
  __device__ __forceinline__ int Row(const DwTile& t, const DwTileAt& at) const {
    return at.oh0 + t.q[1] * r;
  }
  __device__ __forceinline__ bool Active(const DwParams& p, const DwTile& t, const DwTileAt& at) const {
    return has_outputs && Row(t, at) < p.out[1] && at.ow0 + t.q[2] * c < p.out[2];
  }
};

// A CTA's run of tiles [first, end) as a two-stage pipeline of (tile, input
// slice) items: IssueNext starts the next item's patch (into the other
// stage) while the current one is used; WaitCurrent makes the current
// patch visible to every thread; Advance moves on once every thread is done
// with it. Depth slices outside the input have no patch (have == false).
template <typename T>
struct PatchPipeline {
  const DwParams& p;
  const DwTile& t;
  uint4* patches;
  int cv0, stage_vecs, stage = 0;
  int64_t end;
  int64_t tile;  // the current item: tile, slice kd, where it starts, its patch
  int kd = 0;
  DwTileAt at;
  bool have;
  int64_t next_tile = 0;  // the next item (IssueNext)
  int next_kd = 0;
  DwTileAt next_at;
  bool next_have = false;

  __device__ __forceinline__ PatchPipeline(const DwParams& p_, const DwTile& t_, uint4* patches_, int cv0_,
                                           int64_t first, int64_t end_)
      : p(p_),
        t(t_),
        patches(patches_),
        cv0(cv0_),
        stage_vecs(t_.halo[1] * t_.halo[2] * t_.cvb),
        end(end_),
        tile(first) {
    at = TileAt(p, t, tile);
    have = IssuePatch<T>(p, t, at, kd, cv0, patches);
    CpAsyncCommit();
  }
  __device__ __forceinline__ void IssueNext() {
    next_tile = tile;
    next_kd = kd + 1;
    if (next_kd == p.window[0]) {
      next_kd = 0;
      ++next_tile;
    }
    next_at = at;
    next_have = false;
    if (next_tile < end) {
      if (next_tile != tile) next_at = TileAt(p, t, next_tile);
      next_have = IssuePatch<T>(p, t, next_at, next_kd, cv0, patches + (stage ^ 1) * stage_vecs);
    }
    CpAsyncCommit();
  }
  __device__ __forceinline__ void WaitCurrent() {
    CpAsyncWait<1>();
    __syncthreads();
  }
  __device__ __forceinline__ const uint4* patch() const { return patches + stage * stage_vecs; }
  __device__ __forceinline__ bool last() const { return next_tile >= end; }
  __device__ __forceinline__ void Advance() {
    __syncthreads();  // the current stage is read: the item after next refills it
    tile = next_tile;
    kd = next_kd;
    at = next_at;
    have = next_have;
    stage ^= 1;
  }
};

// Each CTA runs t.per_cta consecutive tiles through a PatchPipeline: the
// next item's patch is in flight (cp.async) while the current one is
// summed, so the loads of a CTA never wait for its arithmetic. kW > 0: the
// window's width, for windows that wide at stride 1 along W (the patch
// vectors of a row unpacked once; unpacking is most of the instructions),
// 0 any window.
template <typename T, typename OT, Act A, int kW>
__global__ void __launch_bounds__(kDwThreads) DepthwiseFwdTiled(DwParams p, DwTile t) {
  constexpr int E = Vec16<T>::kElems;
  extern __shared__ uint4 patches[];  // two stages of [halo H][halo W][cvb]
  const T* w = static_cast<const T*>(p.w);
  const int64_t end = min(int64_t(blockIdx.x + 1) * t.per_cta, t.tiles_total);
  const DwThread me(p, t);
  const int cv0 = me.cv0, v = me.v, r = me.r, c = me.c;

  float acc[kDwStrip][E];
#pragma unroll
  for (int j = 0; j < kDwStrip; ++j)
#pragma unroll
    for (int e = 0; e < E; ++e) acc[j][e] = 0.0f;

  PatchPipeline<T> pipe(p, t, patches, cv0, int64_t(blockIdx.x) * t.per_cta, end);
  while (true) {
    pipe.IssueNext();
    pipe.WaitCurrent();
    const int kd = pipe.kd;
    const DwTileAt& at = pipe.at;
    const int oh = me.Row(t, at);
    const bool active = me.Active(p, t, at);
    if (pipe.have && active) {
      // Running pointers: the tap's weight vector (one channel row a tap)
      // and the patch vector of output j and tap kw (j * se + kw pixels in).
      const uint4* wp = reinterpret_cast<const uint4*>(
          w + int64_t(kd) * p.window[1] * p.window[2] * p.channels + int64_t(cv0 + v) * E);
      const int w_step = int(p.channels / E), j_step = t.se[2] * t.cvb;
      for (int kh = 0; kh < p.window[1]; ++kh) {
        const uint4* xp = pipe.patch() + ((r * t.se[1] + kh) * t.halo[2] + c * t.se[2]) * t.cvb + v;
        if constexpr (kW > 0) {
          // A row's kDwStrip + kW - 1 patch vectors unpacked once, each
          // serving up to kW (output, tap) pairs (stride 1 along W only).
          float xf[kDwStrip + kW - 1][E];
#pragma unroll
          for (int m = 0; m < kDwStrip + kW - 1; ++m) UnpackFast<T>(xp[m * t.cvb], xf[m]);
#pragma unroll
          for (int kw = 0; kw < kW; ++kw, wp += w_step) {
            float wf[E];
            UnpackFast<T>(__ldg(wp), wf);
#pragma unroll
            for (int j = 0; j < kDwStrip; ++j)
#pragma unroll
              for (int e = 0; e < E; ++e) acc[j][e] = fmaf(xf[j + kw][e], wf[e], acc[j][e]);
          }
        } else {
          for (int kw = 0; kw < p.window[2]; ++kw, wp += w_step, xp += t.cvb) {
            float wf[E];
            UnpackFast<T>(__ldg(wp), wf);
#pragma unroll
            for (int j = 0; j < kDwStrip; ++j) {
              float xf[E];
              UnpackFast<T>(xp[j * j_step], xf);
#pragma unroll
              for (int e = 0; e < E; ++e) acc[j][e] = fmaf(xf[e], wf[e], acc[j][e]);
            }
          }
        }
      }
    }
    if (kd == p.window[0] - 1) {
      if (active) {
        const int64_t c_elem = int64_t(cv0 + v) * E;
#pragma unroll
        for (int j = 0; j < kDwStrip; ++j) {
          const int ow = at.ow0 + t.q[2] * (c + j);
          if (ow < p.out[2]) {
            const int64_t yi =
                (((at.n * p.out[0] + at.od) * p.out[1] + oh) * p.out[2] + ow) * p.channels + c_elem;
            FinishVector<OT, E, A>(p, yi, c_elem, acc[j]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kDwStrip; ++j)
#pragma unroll
        for (int e = 0; e < E; ++e) acc[j][e] = 0.0f;
    }
    if (pipe.last()) break;
    pipe.Advance();
  }
}

}  // namespace jaxdnn::conv
