// Winograd's minimal filtering F(M x M, 3x3) (Lavin and Gray, 2016), shared
// by the CPU forward (cpu/winograd.cc) and the CUDA one
// (sm80/winograd_fwd.cu): which problems it serves and its transform
// matrices. Each M x M block of outputs comes from a T x T input tile,
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

}  // namespace jaxdnn::conv
