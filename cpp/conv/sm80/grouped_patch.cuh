// The channel-slice patch the tiled grouped kernels read (grouped_tiled_*.cu):
// a CTA serves a slice of up to 64 input channels (8 groups of 8, 4 of 16,
// 2 of 32) and a tile of output positions (rows x columns of one output
// depth), and stages the tile's whole input window once: every pixel's
// slice (up to one 128-byte line) in one pass, so the taps re-read shared
// memory, not L2, and every copy fills a whole sector. The per-warp kernel
// (grouped_fwd.cu) read 16 bytes a pixel a tap: one L1 wavefront per
// copy, the taps' re-reads from L2 (docs/perf/conv.md, "Grouped
// convolutions").
//
// A pixel's line is padded to an odd count of 16-byte chunks, so the 8 rows
// of an ldmatrix (8 neighbouring pixels, one chunk) fall in 8 different
// bank groups, and an address is the sum of a position's and a tap's
// offsets (an XOR swizzle would cost a dozen instructions a load). The pad
// chunk stays zero: the K step past an odd chunk count reads it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "conv/problem.h"
#include "conv/sm80/grouped_common.cuh"

namespace jaxdnn::conv {

constexpr int kGpTiledWarps = 8;
constexpr int kGpTiledPositions = 128;            // output positions a tile aims at
constexpr size_t kGpTiledSmemBudget = 112 << 10;  // two CTAs an SM

struct GpPatchPlan {
  int slice_groups = 0;                  // groups a CTA serves
  int cpp = 0, cpp_log2 = 0;             // 16-byte chunks of the slice a pixel
  int line = 0;                          // chunks a staged pixel: cpp and the zero pad, odd
  int tile_rows = 0, tile_cols = 0;      // output positions a tile: rows x columns
  int patch[3] = {0, 0, 0};              // the tile's input window: depth, rows, columns
  int blocks_rows = 0, blocks_cols = 0;  // tiles along an output depth's rows and columns
  int64_t tiles = 0;                     // N * out depth * blocks_rows * blocks_cols: 0 for an empty batch
  bool fits = false;                     // whether the kernel serves the geometry, whatever the batch
  int m_pairs = 0;                       // pairs of 16-position mma tiles covering a tile

  __host__ __device__ int pixels() const { return patch[0] * patch[1] * patch[2]; }
  __host__ __device__ int positions() const { return tile_rows * tile_cols; }
  __host__ __device__ size_t patch_bytes() const { return size_t(pixels()) * line * 16; }
};

// The largest power-of-two group count whose channels fit a 128-byte line
// and divide the groups.
inline int GpSliceGroups(const ConvGeometry& g) {
  int s = 1;
  while (2 * s * g.cin_g() <= 64 && g.groups % (2 * s) == 0) s *= 2;
  return s;
}

// The plan for g: fits == false when no tile fits `budget` bytes of shared
// memory together with `fixed_bytes` (the caller's other buffers) and
// `per_position` bytes an output position (the caller's staging), or the
// output is empty along a row or column. Whether it fits does not depend on
// the batch (the plan queries ask at batch 1).
inline GpPatchPlan GpPlanPatch(const ConvGeometry& g, size_t fixed_bytes, size_t per_position,
                               size_t budget = kGpTiledSmemBudget) {
  GpPatchPlan pl;
  pl.slice_groups = GpSliceGroups(g);
  pl.cpp = int(pl.slice_groups * g.cin_g() / 8);
  pl.cpp_log2 = Log2Exact(pl.cpp);
  pl.line = pl.cpp == 1 ? 3 : pl.cpp + 1;
  if (g.out[0] < 1 || g.out[1] < 1 || g.out[2] < 1) return pl;
  const int oh = int(g.out[1]), ow = int(g.out[2]);
  int cols = ow < kGpTiledPositions ? ow : kGpTiledPositions;
  int rows = kGpTiledPositions / cols;
  if (rows > oh) rows = oh;
  if (rows < 1) rows = 1;
  rows = (oh + (oh + rows - 1) / rows - 1) / ((oh + rows - 1) / rows);  // balanced blocks
  // The bytes a tile of rows x cols needs, in 64 bits (a dilated window's
  // extent can pass 2^31 pixels); SIZE_MAX past 2^20 pixels a dim.
  auto need = [&]() -> size_t {
    const int64_t ext[3] = {(g.window[0] - 1) * g.k_dilation[0] + 1,
                            (rows - 1) * g.stride[1] + (g.window[1] - 1) * g.k_dilation[1] + 1,
                            (cols - 1) * g.stride[2] + (g.window[2] - 1) * g.k_dilation[2] + 1};
    for (int64_t e : ext)
      if (e > (int64_t(1) << 20)) return SIZE_MAX;
    pl.tile_rows = rows;
    pl.tile_cols = cols;
    for (int k = 0; k < 3; ++k) pl.patch[k] = int(ext[k]);
    pl.m_pairs = (rows * cols + 2 * kGpRows - 1) / (2 * kGpRows);
    const size_t pixels = size_t(ext[0]) * size_t(ext[1]) * size_t(ext[2]);
    if (pixels > budget) return SIZE_MAX;
    return pixels * pl.line * 16 + fixed_bytes + size_t(pl.m_pairs) * 2 * kGpRows * per_position;
  };
  while (need() > budget) {
    if (rows > 1) {
      --rows;
    } else if (cols > 16) {
      cols = (cols + 1) / 2;
    } else {
      return pl;
    }
  }
  pl.fits = true;
  pl.blocks_rows = (oh + rows - 1) / rows;
  pl.blocks_cols = (ow + cols - 1) / cols;
  pl.tiles = g.batch * g.out[0] * pl.blocks_rows * pl.blocks_cols;
  return pl;
}

// Where a tile starts: its image, output depth, first output row and column.
struct GpTile {
  int64_t n;
  int od, oh0, ow0;
};

// 32-bit divisions: tiles < 2^31 (GroupedGeometryRefusal bounds the output
// rows), and a 64-bit division is a loop of some hundred instructions.
__device__ __forceinline__ GpTile GpTileAt(const GpPatchPlan& pl, int out_depth, int64_t tile) {
  GpTile t;
  uint32_t rest = uint32_t(tile);
  const uint32_t cb = rest % uint32_t(pl.blocks_cols);
  rest /= uint32_t(pl.blocks_cols);
  const uint32_t rb = rest % uint32_t(pl.blocks_rows);
  rest /= uint32_t(pl.blocks_rows);
  t.od = int(rest % uint32_t(out_depth));
  t.n = rest / uint32_t(out_depth);
  t.oh0 = int(rb) * pl.tile_rows;
  t.ow0 = int(cb) * pl.tile_cols;
  return t;
}

// Each K chunk kc = (tap, 8-channel chunk of a group)'s offset, in chunks,
// from a position's window corner in the patch.
__device__ inline void GpFillChunkOffsets(const GpPatchPlan& pl, const GpGeometry& g, int* koff) {
  for (int kc = threadIdx.x; kc < g.chunks; kc += blockDim.x) {
    const int tap = kc >> g.cpt_log2;
    const int kw = tap % g.window[2], kh = (tap / g.window[2]) % g.window[1],
              kd = tap / (g.window[2] * g.window[1]);
    const int pix = (kd * g.k_dil[0] * pl.patch[1] + kh * g.k_dil[1]) * pl.patch[2] + kw * g.k_dil[2];
    koff[kc] = pix * pl.line + (kc & ((1 << g.cpt_log2) - 1));
  }
}

// Zeros the pixels' pad chunks (no copy writes them, so once a kernel).
__device__ inline void GpZeroPads(const GpPatchPlan& pl, uint4* patch) {
  const int pads = pl.line - pl.cpp;
  for (int i = threadIdx.x; i < pl.pixels() * pads; i += blockDim.x) {
    const int pix = i / pads;
    patch[pix * pl.line + pl.cpp + i - pix * pads] = make_uint4(0, 0, 0, 0);
  }
}

// Starts the copies of a tile's input window (its slice's channels) into
// `patch`, pixel p's chunk c at p * line + c; zeros for padding. x is
// [N, in depth, in rows, in cols, C]. A thread walks its pixels by a fixed
// step, carrying columns into rows and rows into depth (no divisions).
template <typename T>
__device__ void GpStagePatch(const GpPatchPlan& pl, const GpGeometry& g, const T* x, int slice,
                             const GpTile& t, uint4* patch) {
  const int d0 = t.od * g.stride[0] - g.pad_lo[0];
  const int h0 = t.oh0 * g.stride[1] - g.pad_lo[1];
  const int w0 = t.ow0 * g.stride[2] - g.pad_lo[2];
  const T* base = x + t.n * g.in_positions * g.channels + int64_t(slice) * (pl.cpp * 8);
  const int step = blockDim.x >> pl.cpp_log2, c = threadIdx.x & (pl.cpp - 1);
  const int cols = pl.patch[2], rows = pl.patch[1], pixels = pl.pixels();
  const int dcol = step % cols, drow = step / cols;
  int pix = threadIdx.x >> pl.cpp_log2;
  int pc = pix % cols, pr = (pix / cols) % rows, pd = pix / (cols * rows);
  for (; pix < pixels; pix += step) {
    const int id = d0 + pd, ih = h0 + pr, iw = w0 + pc;
    const bool valid = unsigned(id) < unsigned(g.in[0]) && unsigned(ih) < unsigned(g.in[1]) &&
                       unsigned(iw) < unsigned(g.in[2]);
    const T* src = valid ? base + (int64_t(id * g.in[1] + ih) * g.in[2] + iw) * g.channels + c * 8 : base;
    CpAsync16(patch + pix * pl.line + c, src, valid ? 16 : 0);
    pc += dcol;
    pr += drow;
    if (pc >= cols) {
      pc -= cols;
      ++pr;
    }
    while (pr >= rows) {
      pr -= rows;
      ++pd;
    }
  }
}

}  // namespace jaxdnn::conv
