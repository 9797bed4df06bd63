// Winograd's minimal filtering F(M x M, 3x3) (Lavin and Gray, 2016), shared
// by the CPU forward (cpu/winograd.cc) and the CUDA one
// (sm80/winograd_fwd.cu): which problems it serves, its transform matrices
// and the per-tile transforms. Each M x M block of outputs comes from a T x T input tile,
// T = M + 2, as Y = A^T [(G g G^T) .* (B^T d B)] A. F(2, 3) interpolates at
// 0, 1, -1 and infinity; F(4, 3) at 0, 1, -1, 2, -2 and infinity.
// The matrices are functions, not arrays, so device code can read them; every
// caller's loops are unrolled, so each entry folds to a constant. The input
// and output transforms skip B's and A's zero entries (an infinite input
// then spreads only where the matrices mix it); the weight transform does
// not (an infinite weight gives NaN), on the CPU and CUDA alike.
#pragma once

#include "common/host_device.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

// A 3x3 window over the last two spatial dims (a depth window of 1 in 3D),
// stride 1, no input or kernel dilation; any padding and groups.
inline bool WinogradServes(const ConvGeometry& g) {
  for (int k = 0; k < 3; ++k) {
    if (g.stride[k] != 1 || g.in_dilation[k] != 1 || g.k_dilation[k] != 1) return false;
  }
  return g.window[0] == 1 && g.window[1] == 3 && g.window[2] == 3;
}

template <int M>
struct WinogradMatrices;

template <>
struct WinogradMatrices<2> {
  static constexpr int kT = 4;
  JAXDNN_HD static constexpr float Bt(int a, int r) {
    constexpr float k[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
    return k[a][r];
  }
  JAXDNN_HD static constexpr float G(int a, int r) {
    constexpr float k[4][3] = {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
    return k[a][r];
  }
  JAXDNN_HD static constexpr float At(int a, int r) {
    constexpr float k[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
    return k[a][r];
  }
};

template <>
struct WinogradMatrices<4> {
  static constexpr int kT = 6;
  JAXDNN_HD static constexpr float Bt(int a, int r) {
    constexpr float k[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                               {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
    return k[a][r];
  }
  JAXDNN_HD static constexpr float G(int a, int r) {
    constexpr float k[6][3] = {{0.25f, 0, 0},
                               {-1.0f / 6, -1.0f / 6, -1.0f / 6},
                               {-1.0f / 6, 1.0f / 6, -1.0f / 6},
                               {1.0f / 24, 1.0f / 12, 1.0f / 6},
                               {1.0f / 24, -1.0f / 12, 1.0f / 6},
                               {0, 0, 1}};
    return k[a][r];
  }
  JAXDNN_HD static constexpr float At(int a, int r) {
    constexpr float k[4][6] = {
        {1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
    return k[a][r];
  }
};

// The three transforms of one tile and channel (pair), shared by the CPU and
// CUDA kernels so both compute the same sums in the same order. kT = M + 2.

// u = G k G^T: one (input, output channel) pair's 3x3 weights at the T x T
// points.
template <int M>
JAXDNN_HD void WinogradWeightTransform(const float (&k)[3][3],
                                       float (&u)[WinogradMatrices<M>::kT][WinogradMatrices<M>::kT]) {
  using X = WinogradMatrices<M>;
  constexpr int kT = X::kT;
  float t[kT][3];  // G k
  JAXDNN_UNROLL
  for (int a = 0; a < kT; ++a) {
    JAXDNN_UNROLL
    for (int b = 0; b < 3; ++b) t[a][b] = X::G(a, 0) * k[0][b] + X::G(a, 1) * k[1][b] + X::G(a, 2) * k[2][b];
  }
  JAXDNN_UNROLL
  for (int a = 0; a < kT; ++a) {
    JAXDNN_UNROLL
    for (int b = 0; b < kT; ++b) u[a][b] = t[a][0] * X::G(b, 0) + t[a][1] * X::G(b, 1) + t[a][2] * X::G(b, 2);
  }
}

// v = B^T d B: one channel's T x T input tile at the points, B's zeros
// skipped (an infinite input reaches only the points that mix it).
template <int M>
JAXDNN_HD void WinogradInputTransform(const float (&d)[WinogradMatrices<M>::kT][WinogradMatrices<M>::kT],
                                      float (&v)[WinogradMatrices<M>::kT][WinogradMatrices<M>::kT]) {
  using X = WinogradMatrices<M>;
  constexpr int kT = X::kT;
  float t[kT][kT];  // B^T d
  JAXDNN_UNROLL
  for (int a = 0; a < kT; ++a) {
    JAXDNN_UNROLL
    for (int c = 0; c < kT; ++c) {
      float s = 0.0f;
      JAXDNN_UNROLL
      for (int r = 0; r < kT; ++r) {
        if (X::Bt(a, r) != 0.0f) s += X::Bt(a, r) * d[r][c];
      }
      t[a][c] = s;
    }
  }
  JAXDNN_UNROLL
  for (int a = 0; a < kT; ++a) {
    JAXDNN_UNROLL
    for (int b = 0; b < kT; ++b) {
      float s = 0.0f;
      JAXDNN_UNROLL
      for (int c = 0; c < kT; ++c) {
        if (X::Bt(b, c) != 0.0f) s += t[a][c] * X::Bt(b, c);
      }
      v[a][b] = s;
    }
  }
}

// y = A^T m A: one output channel's M x M outputs of a tile from its T x T
// products, A's zeros skipped.
template <int M>
JAXDNN_HD void WinogradOutputTransform(const float (&m)[WinogradMatrices<M>::kT][WinogradMatrices<M>::kT],
                                       float (&y)[M][M]) {
  using X = WinogradMatrices<M>;
  constexpr int kT = X::kT;
  float t[M][kT];  // A^T m
  JAXDNN_UNROLL
  for (int a = 0; a < M; ++a) {
    JAXDNN_UNROLL
    for (int c = 0; c < kT; ++c) {
      float s = 0.0f;
      JAXDNN_UNROLL
      for (int r = 0; r < kT; ++r) {
        if (X::At(a, r) != 0.0f) s += X::At(a, r) * m[r][c];
      }
      t[a][c] = s;
    }
  }
  JAXDNN_UNROLL
  for (int a = 0; a < M; ++a) {
    JAXDNN_UNROLL
    for (int b = 0; b < M; ++b) {
      float s = 0.0f;
      JAXDNN_UNROLL
      for (int c = 0; c < kT; ++c) {
        if (X::At(b, c) != 0.0f) s += t[a][c] * X::At(b, c);
      }
      y[a][b] = s;
    }
  }
}

}  // namespace jaxdnn::conv
