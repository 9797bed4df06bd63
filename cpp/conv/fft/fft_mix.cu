// The FFT convolution's channel mixing on CUDA. A warp takes 32 consecutive
// frequencies of one TPxTQ output tile, so every load and store is a whole
// 256-byte line; a block's 8 warps take 8 tiles of the same frequencies and
// the blocks of one frequency range are consecutive in the grid, so the
// operands' rows are read from DRAM about once and re-served from L2. Each
// output is summed over the contracted index in order (deterministic).
#include "conv/fft/fft_mix_cuda.h"

#include <algorithm>

namespace jaxdnn::conv {
namespace {

constexpr int kTile = 4;   // TP = TQ: 16 complex accumulators a thread
constexpr int kWarps = 8;  // tiles a block
constexpr int64_t kMaxGridY = 65535;

template <bool kConj>
__global__ void __launch_bounds__(32 * kWarps)
    FftMixKernel(FftContraction c, int64_t freqs, int64_t tile_blocks, int64_t tiles_q,
                 const float2* __restrict__ L, const float2* __restrict__ R, float2* __restrict__ O) {
  const int64_t tile = (blockIdx.x % tile_blocks) * kWarps + threadIdx.y;
  const int64_t f = (blockIdx.x / tile_blocks) * 32 + threadIdx.x;
  const int64_t g = blockIdx.y;
  const int64_t p0 = tile / tiles_q * kTile, q0 = tile % tiles_q * kTile;
  if (f >= freqs || p0 >= c.P) return;
  // Row pointers at r = 0 (a tile's rows past P or Q read the last row
  // instead, their sums never stored), stepped by a whole row of r a step:
  // the loop does no index arithmetic.
  const float2* l[kTile];
  const float2* rv[kTile];
#pragma unroll
  for (int i = 0; i < kTile; ++i) {
    const int64_t p = p0 + i < c.P ? p0 + i : c.P - 1, q = q0 + i < c.Q ? q0 + i : c.Q - 1;
    l[i] = L + (p * c.lp + g * c.lg) * freqs + f;
    rv[i] = R + (q * c.rq + g * c.rg) * freqs + f;
  }
  const int64_t l_step = c.lr * freqs, r_step = c.rr * freqs;
  float2 acc[kTile][kTile];
#pragma unroll
  for (int i = 0; i < kTile; ++i)
#pragma unroll
    for (int j = 0; j < kTile; ++j) acc[i][j] = make_float2(0.f, 0.f);
  // Double-buffered: step r + 1's loads are in flight while step r's
  // multiply-adds run (a loop waiting on each step's L2 loads measured 5x
  // slower than its arithmetic).
  float2 a[kTile], b[kTile];
#pragma unroll
  for (int i = 0; i < kTile; ++i) {
    a[i] = __ldg(l[i]);
    b[i] = __ldg(rv[i]);
  }
  for (int64_t r = 0; r < c.R; ++r) {
    float2 na[kTile], nb[kTile];
    const int64_t next = r + 1 < c.R ? r + 1 : r;
#pragma unroll
    for (int i = 0; i < kTile; ++i) {
      na[i] = __ldg(l[i] + next * l_step);
      nb[i] = __ldg(rv[i] + next * r_step);
    }
#pragma unroll
    for (int i = 0; i < kTile; ++i)
#pragma unroll
      for (int j = 0; j < kTile; ++j) {
        const float by = kConj ? -b[j].y : b[j].y;
        acc[i][j].x = fmaf(a[i].x, b[j].x, fmaf(-a[i].y, by, acc[i][j].x));
        acc[i][j].y = fmaf(a[i].x, by, fmaf(a[i].y, b[j].x, acc[i][j].y));
      }
#pragma unroll
    for (int i = 0; i < kTile; ++i) {
      a[i] = na[i];
      b[i] = nb[i];
    }
  }
#pragma unroll
  for (int i = 0; i < kTile; ++i)
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      const int64_t p = p0 + i, q = q0 + j;
      if (p < c.P && q < c.Q) O[(p * c.op + q * c.oq + g * c.og) * freqs + f] = acc[i][j];
    }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void LaunchFftMix(const FftMixProblem& s, const std::complex<float>* a, const std::complex<float>* b,
                  std::complex<float>* out, cudaStream_t stream) {
  const FftContraction c = ContractionOf(s);
  if (c.P == 0 || c.Q == 0) return;
  if (c.R == 0) {  // an empty sum (the weight gradient of an empty batch)
    cudaMemsetAsync(out, 0, sizeof(float2) * c.groups * c.P * c.Q * s.freqs, stream);
    return;
  }
  const int64_t tiles_q = CeilDiv(c.Q, kTile), tiles = CeilDiv(c.P, kTile) * tiles_q;
  const int64_t tile_blocks = CeilDiv(tiles, kWarps);
  const auto* L = reinterpret_cast<const float2*>(a);
  const auto* R = reinterpret_cast<const float2*>(b);
  auto* O = reinterpret_cast<float2*>(out);
  const dim3 block(32, kWarps);
  // Groups on the grid's y dim, at most 65535 a launch (a vmap folded into
  // the groups can pass that): each launch's operands start at its first
  // group (every index is linear in the group).
  for (int64_t g0 = 0; g0 < c.groups; g0 += kMaxGridY) {
    const float2 *Lg = L + g0 * c.lg * s.freqs, *Rg = R + g0 * c.rg * s.freqs;
    float2* Og = O + g0 * c.og * s.freqs;
    const dim3 grid(unsigned(tile_blocks * CeilDiv(s.freqs, 32)),
                    unsigned(std::min(kMaxGridY, c.groups - g0)));
    if (c.conj_r) {
      FftMixKernel<true><<<grid, block, 0, stream>>>(c, s.freqs, tile_blocks, tiles_q, Lg, Rg, Og);
    } else {
      FftMixKernel<false><<<grid, block, 0, stream>>>(c, s.freqs, tile_blocks, tiles_q, Lg, Rg, Og);
    }
  }
}

}  // namespace jaxdnn::conv
