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

constexpr int kTile = 4;                // input tile side (2 outputs + 3 taps - 1)
constexpr int kPoints = kTile * kTile;  // products a tile and channel pair

// U = G g G^T for every (ci, co) of each group: [16][groups][C_in/g][ld]
// floats, ld = C_out/g rounded up to the GEMM's 16 columns (zero past it).
// g is w[j1 * 3 + j2][ci][co] (ci within co's group).
template <typename T>
std::vector<float> TransformWeights(const ConvGeometry& g, const T* w, int64_t ld) {
  const int64_t cin_g = g.cin_g(), cout_g = g.cout_g(), cout = g.out_channels;
  std::vector<float> u(size_t(kPoints * g.groups * cin_g * ld), 0.0f);
  for (int64_t ci = 0; ci < cin_g; ++ci) {
    for (int64_t co = 0; co < cout; ++co) {
      float k[3][3], t[4][3];
      for (int a = 0; a < 3; ++a) {
        for (int b = 0; b < 3; ++b) k[a][b] = ToFloat(w[((a * 3 + b) * cin_g + ci) * cout + co]);
      }
      for (int b = 0; b < 3; ++b) {  // t = G k
        t[0][b] = k[0][b];
        t[1][b] = 0.5f * (k[0][b] + k[1][b] + k[2][b]);
        t[2][b] = 0.5f * (k[0][b] - k[1][b] + k[2][b]);
        t[3][b] = k[2][b];
      }
      const int64_t gr = co / cout_g;
      for (int a = 0; a < 4; ++a) {  // u = t G^T
        const float r[4] = {t[a][0], 0.5f * (t[a][0] + t[a][1] + t[a][2]),
                            0.5f * (t[a][0] - t[a][1] + t[a][2]), t[a][2]};
        for (int b = 0; b < 4; ++b) {
          u[size_t((((a * 4 + b) * g.groups + gr) * cin_g + ci) * ld + co % cout_g)] = r[b];
        }
      }
    }
  }
  return u;
}

// V = B^T d B of one tile for channels [0, cin): d[r][c] the tile's input
// rows (null: outside the input, zeros), v[point * v_stride + ci].
template <typename T>
void TransformTile(const T* const (&d)[kTile][kTile], int64_t cin, float* v, int64_t v_stride) {
  for (int64_t ci = 0; ci < cin; ++ci) {
    float x[kTile][kTile], t[kTile][kTile];
    for (int r = 0; r < kTile; ++r) {
      for (int c = 0; c < kTile; ++c) x[r][c] = d[r][c] ? ToFloat(d[r][c][ci]) : 0.0f;
    }
    for (int c = 0; c < kTile; ++c) {  // t = B^T x
      t[0][c] = x[0][c] - x[2][c];
      t[1][c] = x[1][c] + x[2][c];
      t[2][c] = x[2][c] - x[1][c];
      t[3][c] = x[1][c] - x[3][c];
    }
    for (int r = 0; r < kTile; ++r) {  // v = t B
      float* out = v + r * kTile * v_stride + ci;
      out[0] = t[r][0] - t[r][2];
      out[v_stride] = t[r][1] + t[r][2];
      out[2 * v_stride] = t[r][2] - t[r][1];
      out[3 * v_stride] = t[r][1] - t[r][3];
    }
  }
}

// y = A^T m A: the 2x2 outputs of one tile and output channel from its 16
// products m[point].
inline void OutputTransform(const float (&m)[kPoints], float (&y)[2][2]) {
  float t[2][kTile];
  for (int c = 0; c < kTile; ++c) {
    t[0][c] = m[c] + m[4 + c] + m[8 + c];
    t[1][c] = m[4 + c] - m[8 + c] - m[12 + c];
  }
  for (int r = 0; r < 2; ++r) {
    y[r][0] = t[r][0] + t[r][1] + t[r][2];
    y[r][1] = t[r][1] - t[r][2] - t[r][3];
  }
}

// One work item per (sample, depth position, pair of output rows): the row
// pair's tiles transformed, 16 GEMMs, the output transform, the epilogue.
template <typename T>
void Forward(const ConvFwdArgs& p, ffi::ThreadPool* pool) {
  const ConvGeometry& g = p.g;
  const int64_t cin = g.in_channels, cout = g.out_channels, ow = g.out[2];
  const int64_t cin_g = g.cin_g(), cout_g = g.cout_g(), ld = RoundUp(cout_g, kTileCols);
  const std::vector<float> u = TransformWeights(g, static_cast<const T*>(p.w), ld);
  const int64_t row_pairs = (g.out[1] + 1) / 2, tiles = (ow + 1) / 2, rows = RoundUp(tiles, kTileRows);
  const T* x = static_cast<const T*>(p.x);
  ParallelFor(pool, g.batch * g.out[0] * row_pairs, [&](int64_t item) {
    const int64_t n = item / (g.out[0] * row_pairs), o0 = (item / row_pairs) % g.out[0];
    const int64_t o1 = 2 * (item % row_pairs);
    std::vector<float> v(size_t(kPoints * rows * cin), 0.0f), m(size_t(kPoints * tiles * cout), 0.0f);
    const int64_t i0 = o0 - g.pad_lo[0];
    const bool depth_in = i0 >= 0 && i0 < g.in[0];
    for (int64_t t = 0; t < tiles; ++t) {
      const T* d[kTile][kTile];
      for (int r = 0; r < kTile; ++r) {
        const int64_t i1 = o1 - g.pad_lo[1] + r;
        for (int c = 0; c < kTile; ++c) {
          const int64_t i2 = 2 * t - g.pad_lo[2] + c;
          const bool in = depth_in && i1 >= 0 && i1 < g.in[1] && i2 >= 0 && i2 < g.in[2];
          d[r][c] = in ? x + ((n * g.in[0] + i0) * g.in[1] + i1) * g.in[2] * cin + i2 * cin : nullptr;
        }
      }
      TransformTile(d, cin, v.data() + t * cin, rows * cin);
    }
    for (int point = 0; point < kPoints; ++point) {
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        const Run run{u.data() + (point * g.groups + gr) * cin_g * ld, cin_g};
        GemmAcc(v.data() + point * rows * cin + gr * cin_g, cin, &run, 1, ld,
                m.data() + point * tiles * cout + gr * cout_g, cout, tiles, cout_g);
      }
    }
    std::vector<float> acc(size_t(2 * ow * cout));
    for (int64_t t = 0; t < tiles; ++t) {
      for (int64_t co = 0; co < cout; ++co) {
        float mt[kPoints], y[2][2];
        for (int point = 0; point < kPoints; ++point) mt[point] = m[size_t((point * tiles + t) * cout + co)];
        OutputTransform(mt, y);
        for (int r = 0; r < 2; ++r) {
          for (int c = 0; c < 2; ++c) {
            if (2 * t + c < ow) acc[size_t((r * ow + 2 * t + c) * cout + co)] = y[r][c];
          }
        }
      }
    }
    for (int r = 0; r < 2 && o1 + r < g.out[1]; ++r) {
      const int64_t base = ((n * g.out[0] + o0) * g.out[1] + o1 + r) * ow * cout;
      StoreForwardOutputs(p, base, acc.data() + r * ow * cout, ow * cout);
    }
  });
}

}  // namespace

bool WinogradServes(const ConvGeometry& g) {
  for (int k = 0; k < 3; ++k) {
    if (g.stride[k] != 1 || g.in_dilation[k] != 1 || g.k_dilation[k] != 1) return false;
  }
  return g.window[0] == 1 && g.window[1] == 3 && g.window[2] == 3;
}

ffi::Error WinogradFwdCpu(const ConvFwdArgs& p, ffi::ThreadPool* pool) {
  if (!WinogradServes(p.g)) {
    return ffi::Error::InvalidArgument(
        "jaxdnn conv forward: algorithm winograd serves 3x3 windows, stride 1, no dilation");
  }
  return ByDtypeCpu(p.dtype, "jaxdnn conv forward (winograd)",
                    [&](auto t) { Forward<decltype(t)>(p, pool); });
}

}  // namespace jaxdnn::conv
