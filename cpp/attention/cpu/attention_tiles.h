// Tile primitives of the CPU attention kernels: a block of kQBlock queries
// against a block of kKeyBlock keys, float32, written so the compiler
// vectorizes them at the default flags. A dot product is a sequential sum
// over the head dim, a weighted sum sequential over its keys (or queries),
// a row's sum of exponentials eight fixed lanes: orders set by the shape.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention/mask.h"
#include "common/host_half.h"

namespace jaxdnn::attention {

constexpr int64_t kQBlock = 16;    // query rows per tile (a multiple of 4)
constexpr int64_t kKeyBlock = 64;  // keys per tile (a multiple of 16)

inline int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Offsets of element [b, pos, head, 0] in a [batch, len, heads, D] array.
inline int64_t RowOffset(int64_t b, int64_t pos, int64_t head, int64_t len, int64_t heads, int64_t dim) {
  return ((b * len + pos) * heads + head) * dim;
}

// Rows [b, 0:len, head, :] as float32 [len_pad, dim], zero rows past len;
// with a paged cache `pg`, key positions 0:len of batch row b in the pool.
template <typename T>
void WidenRows(const T* src, int64_t b, int64_t head, int64_t len, int64_t heads, int64_t dim,
               int64_t len_pad, std::vector<float>& dst, const PagedKv& pg = {}) {
  dst.assign(len_pad * dim, 0.f);
  for (int64_t j = 0; j < len; ++j) {
    const T* row = src + (KvRow(pg, b, j, len) * heads + head) * dim;
    for (int64_t d = 0; d < dim; ++d) dst[j * dim + d] = ToFloat(row[d]);
  }
}

// The same rows transposed into panels, one per key block: panel p is
// [dim, kKeyBlock] at p * dim * kKeyBlock, so a tile reads one contiguous
// run (a whole transposed array would put its rows a power of two apart,
// all on the same cache sets).
template <typename T>
void WidenPanels(const T* src, int64_t b, int64_t head, int64_t len, int64_t heads, int64_t dim,
                 int64_t len_pad, std::vector<float>& dst, const PagedKv& pg = {}) {
  dst.assign(dim * len_pad, 0.f);
  for (int64_t j = 0; j < len; ++j) {
    const T* row = src + (KvRow(pg, b, j, len) * heads + head) * dim;
    float* panel = &dst[j / kKeyBlock * dim * kKeyBlock + j % kKeyBlock];
    for (int64_t d = 0; d < dim; ++d) panel[d * kKeyBlock] = ToFloat(row[d]);
  }
}

// s[r][t] = sum over d (in order) of a[r][d] * panel[d][t], r < kQBlock, t
// < kKeyBlock; a is [kQBlock, dim], panel [dim, kKeyBlock] (WidenPanels).
void ScoreTile(const float* a, int64_t dim, const float* panel, float* s);

// acc[d] += w[t] * rows[t][d] for t < n in order, skipping zero weights (a
// masked or dropped key adds nothing, even where its row is not finite).
void WeightedRowSum(float* acc, const float* w, const float* rows, int64_t n, int64_t dim);

// out[t][d] += w[r][t] * a[r][d] for t < n, r < n_rows in order (r inner),
// zero weights skipped; w is [kQBlock, kKeyBlock], a is [kQBlock, dim].
void WeightedColumnSum(float* out, const float* w, const float* a, int64_t n_rows, int64_t n, int64_t dim);

// The same sums for a whole tile, zero weights included (so only for finite
// rows, where a zero weight adds zero): acc[r][d] += w[r][t] * rows[t][d]
// for r < kQBlock, t < n in order; acc is [kQBlock, dim].
void RowSumTile(float* acc, const float* w, const float* rows, int64_t n, int64_t dim);

// out[t][d] += w[r][t] * a[r][d] for t < kKeyBlock, r < kQBlock in order,
// zero weights included (finite a only); out is [kKeyBlock, dim].
void ColumnSumTile(float* out, const float* w, const float* a, int64_t dim);

// No inf or NaN among x[0:n]: the tile sums above may then be used.
bool AllFinite(const float* x, int64_t n);

// Forward weights of one row's keys t < n (key j0 + t): w[t] = e^(x[t] -
// max) times the dropout keep scale (0 where x is -inf or dropped). Returns
// the sum of the undropped terms, eight lanes added in a fixed order.
float SoftmaxWeights(const float* x, int64_t n, float max, float* w, const DropoutPlan& drop,
                     uint32_t row_state, uint32_t j0);

// Backward of one row with plain logits (scaled products): pt holds the
// products, gt dO.V; they become the dropout-scaled probabilities and the
// product gradients: pr = e^(pt * scale - lse), keep as in the forward,
// pt = pr * keep, gt = pr * (gt * keep - delta) * scale.
void PlainGradients(float* pt, float* gt, int64_t n, float scale, float lse, float delta,
                    const DropoutPlan& drop, uint32_t row_state, uint32_t j0);

// x[t] *= scale for t < n; returns the largest (-inf when n is 0).
float ScaleAndMax(float* x, int64_t n, float scale);

}  // namespace jaxdnn::attention
