#include "conv/cpu/winograd.h"

#include <algorithm>
#include <vector>

#include "common/cpu_dispatch.h"
#include "common/cpu_parallel.h"
#include "common/host_half.h"
#include "conv/cpu/forward_epilogue.h"
#include "conv/cpu/gemm_tiles.h"

namespace jaxdnn::conv {
namespace {

template <int M>
constexpr int kTileSide = WinogradMatrices<M>::kT;  // T = M + 2 inputs a side

// U = G g G^T for every (ci, co) of each group: [T * T][groups][C_in/g][ld]
// floats, ld = C_out/g rounded up to the GEMM's 16 columns (zero past it).
// g is w[j1 * 3 + j2][ci][co] (ci within co's group).
template <int M, typename T>
std::vector<float> TransformWeights(const ConvGeometry& g, const T* w, int64_t ld) {
  constexpr int kT = kTileSide<M>;
  const int64_t cin_g = g.cin_g(), cout_g = g.cout_g(), cout = g.out_channels;
  std::vector<float> u(size_t(kT * kT * g.groups * cin_g * ld), 0.0f);
  for (int64_t ci = 0; ci < cin_g; ++ci) {
    for (int64_t co = 0; co < cout; ++co) {
      float k[3][3], r[kT][kT];
      for (int a = 0; a < 3; ++a) {
        for (int b = 0; b < 3; ++b) k[a][b] = ToFloat(w[((a * 3 + b) * cin_g + ci) * cout + co]);
      }
      WinogradWeightTransform<M>(k, r);
      const int64_t gr = co / cout_g;
      for (int a = 0; a < kT; ++a) {
        for (int b = 0; b < kT; ++b)
          u[size_t((((a * kT + b) * g.groups + gr) * cin_g + ci) * ld + co % cout_g)] = r[a][b];
      }
    }
  }
  return u;
}

// V = B^T d B of one tile for channels [0, cin): d[r][c] the tile's input
// rows (null: outside the input, zeros), v[point * v_stride + ci].
template <int M, typename T>
void TransformTile(const T* const (&d)[kTileSide<M>][kTileSide<M>], int64_t cin, float* v, int64_t v_stride) {
  constexpr int kT = kTileSide<M>;
  for (int64_t ci = 0; ci < cin; ++ci) {
    float x[kT][kT], r[kT][kT];
    for (int a = 0; a < kT; ++a) {
      for (int c = 0; c < kT; ++c) x[a][c] = d[a][c] ? ToFloat(d[a][c][ci]) : 0.0f;
    }
    WinogradInputTransform<M>(x, r);
    for (int a = 0; a < kT; ++a) {
      for (int b = 0; b < kT; ++b) v[(a * kT + b) * v_stride + ci] = r[a][b];
    }
  }
}

// One work item per (sample, depth position, M output rows): the rows'
// tiles transformed, T * T GEMMs, the output transform, the epilogue.
template <int M, typename T>
void Forward(const ConvFwdArgs& p, ffi::ThreadPool* pool) {
  constexpr int kT = kTileSide<M>, kPoints = kT * kT;
  const ConvGeometry& g = p.g;
  const int64_t cin = g.in_channels, cout = g.out_channels, ow = g.out[2];
  const int64_t cin_g = g.cin_g(), cout_g = g.cout_g(), ld = RoundUp(cout_g, kTileCols);
  const std::vector<float> u = TransformWeights<M>(g, static_cast<const T*>(p.w), ld);
  const int64_t row_blocks = (g.out[1] + M - 1) / M, tiles = (ow + M - 1) / M,
                rows = RoundUp(tiles, kTileRows);
  const T* x = static_cast<const T*>(p.x);
  ParallelFor(pool, g.batch * g.out[0] * row_blocks, [&](int64_t item) {
    const int64_t n = item / (g.out[0] * row_blocks), o0 = (item / row_blocks) % g.out[0];
    const int64_t o1 = M * (item % row_blocks);
    std::vector<float> v(size_t(kPoints * rows * cin), 0.0f), m(size_t(kPoints * tiles * cout), 0.0f);
    const int64_t i0 = o0 - g.pad_lo[0];
    const bool depth_in = i0 >= 0 && i0 < g.in[0];
    for (int64_t t = 0; t < tiles; ++t) {
      const T* d[kT][kT];
      for (int r = 0; r < kT; ++r) {
        const int64_t i1 = o1 - g.pad_lo[1] + r;
        for (int c = 0; c < kT; ++c) {
          const int64_t i2 = M * t - g.pad_lo[2] + c;
          const bool in = depth_in && i1 >= 0 && i1 < g.in[1] && i2 >= 0 && i2 < g.in[2];
          d[r][c] = in ? x + ((n * g.in[0] + i0) * g.in[1] + i1) * g.in[2] * cin + i2 * cin : nullptr;
        }
      }
      TransformTile<M>(d, cin, v.data() + t * cin, rows * cin);
    }
    for (int point = 0; point < kPoints; ++point) {
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        const Run run{u.data() + (point * g.groups + gr) * cin_g * ld, cin_g};
        GemmAcc(v.data() + point * rows * cin + gr * cin_g, cin, &run, 1, ld,
                m.data() + point * tiles * cout + gr * cout_g, cout, tiles, cout_g);
      }
    }
    std::vector<float> acc(size_t(M * ow * cout));
    for (int64_t t = 0; t < tiles; ++t) {
      for (int64_t co = 0; co < cout; ++co) {
        float mt[kT][kT], y[M][M];
        for (int point = 0; point < kPoints; ++point)
          mt[point / kT][point % kT] = m[size_t((point * tiles + t) * cout + co)];
        WinogradOutputTransform<M>(mt, y);
        for (int r = 0; r < M; ++r) {
          for (int c = 0; c < M; ++c) {
            if (M * t + c < ow) acc[size_t((r * ow + M * t + c) * cout + co)] = y[r][c];
          }
        }
      }
    }
    for (int r = 0; r < M && o1 + r < g.out[1]; ++r) {
      const int64_t base = ((n * g.out[0] + o0) * g.out[1] + o1 + r) * ow * cout;
      StoreForwardOutputs(p, base, acc.data() + r * ow * cout, ow * cout);
    }
  });
}

}  // namespace

int WinogradOutputTile(const ConvGeometry& g) { return g.out[1] >= 4 && g.out[2] >= 4 ? 4 : 2; }

ffi::Error WinogradFwdCpu(const ConvFwdArgs& p, ffi::ThreadPool* pool) {
  if (!WinogradServes(p.g)) {
    return ffi::Error::InvalidArgument(
        "jaxdnn conv forward: algorithm winograd serves 3x3 windows, stride 1, no dilation");
  }
  const bool four = WinogradOutputTile(p.g) == 4;
  return ByDtypeCpu(p.dtype, "jaxdnn conv forward (winograd)", [&](auto t) {
    if (four) {
      Forward<4, decltype(t)>(p, pool);
    } else {
      Forward<2, decltype(t)>(p, pool);
    }
  });
}

}  // namespace jaxdnn::conv
