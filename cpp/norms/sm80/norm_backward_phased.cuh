// Backward for rows of an odd width, phase-grouped like the forward
// (norms/sm80/norm_forward_phased.cuh): a block takes rows of one phase, so a
// thread's columns are the same in all of them, and it keeps their scale and
// their dscale/dbias partials in registers across its rows, moving dy, z and
// dx in 16-byte vectors (plus one head and one tail element for threads
// t < N). Each block writes one partial row of the workspace, which
// NormReducePartialsKernel sums in a fixed order.
#pragma once

#include "common/cuda_vec.cuh"
#include "norms/problem.h"
#include "norms/sm80/norm_backward.cuh"
#include "norms/sm80/norm_forward_phased.cuh"
#include "norms/sm80/norm_params.cuh"

namespace jaxdnn::norms {

// Blocks as in the forward (ThisPhaseBlock); gridDim.x = the plan's
// partials, a multiple of P.
template <typename T, bool kLayer, int kVpt>
__global__ void __launch_bounds__(256) NormBwdPhasedKernel(NormBwdArgs p, int64_t rows_per_block) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  __shared__ float scratch[2][64];
  const int64_t dim = p.shape.dim, rows = p.shape.rows;
  const PhaseBlock pb = ThisPhaseBlock<T>(dim, rows_per_block);
  const PhaseLayout& l = pb.l;
  const int tid = threadIdx.x, step = blockDim.x;
  const bool has_head = pb.has_head, has_tail = pb.has_tail;
  const int64_t tail_col = pb.tail_col;

  float sc[kVpt][N], acc_s[kVpt][N], acc_b[kVpt][N], sc_h, sc_t;
  float hs = 0.0f, hb = 0.0f, ts = 0.0f, tb = 0.0f;  // head and tail partials
  ByParamDtype<T>(p.params16, [&](auto params16) {
    sc_h = has_head ? LoadParam1<T>(p.scale, tid, params16) : 0.0f;
    sc_t = has_tail ? LoadParam1<T>(p.scale, tail_col, params16) : 0.0f;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = tid + int64_t(k) * step;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        sc[k][e] = v < l.body ? LoadParam1<T>(p.scale, l.head + v * N + e, params16) : 0.0f;
        acc_s[k][e] = acc_b[k][e] = 0.0f;
      }
    }
  });

  const float inv_dim = 1.0f / float(dim);
  for (int64_t i = 0; i < rows_per_block; ++i) {
    const int64_t row = pb.Row(i);
    if (row >= rows) break;  // uniform over the block
    const int64_t base = row * dim;
    const T* dy_r = static_cast<const T*>(p.dy) + base;
    const T* z_r = static_cast<const T*>(p.z) + base;
    uint4 dyr[kVpt], zr[kVpt];
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = tid + int64_t(k) * step;
      const bool in = v < l.body;
      dyr[k] = in ? LoadRow(dy_r + l.head + v * N, p.stream_rows) : make_uint4(0, 0, 0, 0);
      zr[k] = in ? LoadRow(z_r + l.head + v * N, p.stream_rows) : make_uint4(0, 0, 0, 0);
    }
    const float dyh = has_head ? ToF32(dy_r[tid]) : 0.0f, zh = has_head ? ToF32(z_r[tid]) : 0.0f;
    const float dyt = has_tail ? ToF32(dy_r[tail_col]) : 0.0f, zt = has_tail ? ToF32(z_r[tail_col]) : 0.0f;
    const float mean = kLayer ? p.mean[row] : 0.0f;
    const float rstd = p.rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      float dy[N], z[N];
      V::Unpack(dyr[k], dy);
      V::Unpack(zr[k], z);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float xhat = (z[e] - mean) * rstd, g = dy[e] * sc[k][e];
        sum_g += g;
        sum_gx += g * xhat;
        acc_s[k][e] += dy[e] * xhat;
        if constexpr (kLayer) acc_b[k][e] += dy[e];
      }
    }
    const float xh = (zh - mean) * rstd, xt = (zt - mean) * rstd;
    sum_g += dyh * sc_h + dyt * sc_t;
    sum_gx += dyh * sc_h * xh + dyt * sc_t * xt;
    hs += dyh * xh;
    hb += dyh;
    ts += dyt * xt;
    tb += dyt;
    float mg = 0.0f, mgx;
    if constexpr (kLayer) {
      const float2 t = RowSum2OneBarrier(make_float2(sum_g, sum_gx), scratch[i & 1]);
      mg = t.x * inv_dim;
      mgx = t.y * inv_dim;
    } else {
      mgx = RowSumOneBarrier(sum_gx, scratch[i & 1]) * inv_dim;
    }
    T* dx_r = static_cast<T*>(p.dx) + base;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = tid + int64_t(k) * step;
      if (v >= l.body) continue;
      float dy[N], z[N], dx[N];
      V::Unpack(dyr[k], dy);
      V::Unpack(zr[k], z);
#pragma unroll
      for (int e = 0; e < N; ++e) dx[e] = rstd * (dy[e] * sc[k][e] - mg - (z[e] - mean) * rstd * mgx);
      StoreRow(dx_r + l.head + v * N, V::Pack(dx), p.stream_rows);
    }
    if (has_head) dx_r[tid] = FromF32<T>(rstd * (dyh * sc_h - mg - xh * mgx));
    if (has_tail) dx_r[tail_col] = FromF32<T>(rstd * (dyt * sc_t - mg - xt * mgx));
  }

  float* out = p.partials + int64_t(blockIdx.x) * 2 * dim;
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    const int64_t v = tid + int64_t(k) * step;
    if (v >= l.body) continue;
#pragma unroll
    for (int e = 0; e < N; ++e) {
      out[l.head + v * N + e] = acc_s[k][e];
      if constexpr (kLayer) out[dim + l.head + v * N + e] = acc_b[k][e];
    }
  }
  if (has_head) {
    out[tid] = hs;
    if constexpr (kLayer) out[dim + tid] = hb;
  }
  if (has_tail) {
    out[tail_col] = ts;
    if constexpr (kLayer) out[dim + tail_col] = tb;
  }
}

}  // namespace jaxdnn::norms
