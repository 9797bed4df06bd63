// Forward for rows of an odd width (not a whole number of 16-byte vectors),
// in 16-byte vectors all the same. Row r starts (r * dim * itemsize) mod 16
// bytes past a vector boundary, a "phase" that repeats every P rows. A block
// takes the rows of one phase, so in each of its rows the same columns fall
// in the same place: a head of up to N - 1 elements before the first vector
// boundary, a body of whole vectors, a tail of up to N - 1 elements. Each
// thread loads the parameters of its body vectors (and of one head and one
// tail element) once into registers, and then moves rows through 16-byte
// loads and stores only, where element accesses spent one L1 request per
// element on the row and the parameters each (NormFwdStreamKernel's element
// rows ran 4097-wide 16-bit rows at under 60% of XLA's rate).
#pragma once

#include "common/cuda_vec.cuh"
#include "norms/problem.h"
#include "norms/sm80/norm_config.h"
#include "norms/sm80/norm_forward.cuh"
#include "norms/sm80/norm_params.cuh"
#include "norms/sm80/norm_stream.cuh"

namespace jaxdnn::norms {

// Where the vectors of a row of phase `phase` lie.
struct PhaseLayout {
  int head;      // elements before the first 16-byte boundary
  int64_t body;  // whole vectors after it
  int tail;      // elements after the body
};

template <typename T>
__device__ inline PhaseLayout PhaseOf(int64_t dim, int phase) {
  constexpr int N = Vec16<T>::kElems;
  const int64_t bytes = dim * int64_t(sizeof(T));
  // The byte offset of this phase's rows past a vector boundary.
  const int off = int((int64_t(phase) * bytes) % 16);
  PhaseLayout l;
  const int64_t head = ((16 - off) % 16) / int(sizeof(T));
  l.head = int(dim < head ? dim : head);
  l.body = (dim - l.head) / N;
  l.tail = int(dim - l.head - l.body * N);
  return l;
}

// What a phase-grouped block and its thread take: blockIdx.x = chunk * P +
// phase, the rows phase + P * (chunk * rows_per_block + i); threads t < N
// also take head and tail element t.
struct PhaseBlock {
  PhaseLayout l;
  int phases;
  int64_t first_row;
  bool has_head, has_tail;
  int64_t tail_col;
  __device__ int64_t Row(int64_t i) const { return first_row + int64_t(phases) * i; }
};

template <typename T>
__device__ inline PhaseBlock ThisPhaseBlock(int64_t dim, int64_t rows_per_block) {
  PhaseBlock b;
  b.phases = PhaseCountOfBytes(dim * int64_t(sizeof(T)));
  const int phase = int(blockIdx.x % b.phases);
  b.l = PhaseOf<T>(dim, phase);
  b.first_row = phase + int64_t(b.phases) * (blockIdx.x / b.phases) * rows_per_block;
  b.has_head = int(threadIdx.x) < b.l.head;
  b.has_tail = int(threadIdx.x) < b.l.tail;
  b.tail_col = b.l.head + b.l.body * Vec16<T>::kElems + threadIdx.x;
  return b;
}

// blockIdx.x = chunk * P + phase; the block takes rows phase + P * i for i in
// its chunk. kVpt body vectors a thread; threads t < N also take head and
// tail element t. LayerNorm statistics about a shift (the row's first
// element), merged exactly as in NormFwdStreamKernel.
template <typename T, bool kLayer, int kVpt>
__global__ void __launch_bounds__(512) NormFwdPhasedKernel(NormFwdArgs p, int64_t rows_per_block) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  __shared__ float scratch[2][96];
  const int64_t dim = p.shape.dim, rows = p.shape.rows;
  const PhaseBlock pb = ThisPhaseBlock<T>(dim, rows_per_block);
  const PhaseLayout& l = pb.l;
  const int tid = threadIdx.x, step = blockDim.x;
  const bool has_head = pb.has_head, has_tail = pb.has_tail;
  const int64_t tail_col = pb.tail_col;

  // This thread's parameters, for every row of the block.
  float sc[kVpt][N], bi[kVpt][N], sc_h = 0.0f, bi_h = 0.0f, sc_t = 0.0f, bi_t = 0.0f;
  ByParamDtype<T>(p.params16, [&](auto params16) {
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = tid + int64_t(k) * step;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const int64_t c = l.head + v * N + e;
        sc[k][e] = v < l.body ? LoadParam1<T>(p.scale, c, params16) : 0.0f;
        bi[k][e] = (kLayer && v < l.body) ? LoadParam1<T>(p.bias, c, params16) : 0.0f;
      }
    }
    if (has_head) {
      sc_h = LoadParam1<T>(p.scale, tid, params16);
      if constexpr (kLayer) bi_h = LoadParam1<T>(p.bias, tid, params16);
    }
    if (has_tail) {
      sc_t = LoadParam1<T>(p.scale, tail_col, params16);
      if constexpr (kLayer) bi_t = LoadParam1<T>(p.bias, tail_col, params16);
    }
  });

  const float inv_dim = 1.0f / float(dim);
  for (int64_t i = 0; i < rows_per_block; ++i) {
    const int64_t row = pb.Row(i);
    if (row >= rows) break;  // uniform over the block
    const T* x = static_cast<const T*>(p.x) + row * dim;
    T* y = static_cast<T*>(p.y) + row * dim;
    const T* xb = x + l.head;  // 16-byte aligned
    uint4 raw[kVpt];
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = tid + int64_t(k) * step;
      raw[k] = v < l.body ? LoadRow(xb + v * N, p.stream_rows) : make_uint4(0, 0, 0, 0);
    }
    const float vh = has_head ? ToF32(x[tid]) : 0.0f;
    const float vt = has_tail ? ToF32(x[tail_col]) : 0.0f;
    const float shift = kLayer ? ToF32(__ldg(x)) : 0.0f;
    float cnt = 0.0f, sum = 0.0f, sq = 0.0f;
    auto add = [&](float v) {
      const float d = v - shift;
      sum += d;
      sq = fmaf(d, d, sq);
    };
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      if (tid + int64_t(k) * step >= l.body) continue;
      float v[N];
      V::Unpack(raw[k], v);
#pragma unroll
      for (int e = 0; e < N; ++e) add(v[e]);
      cnt += float(N);
    }
    if (has_head) {
      add(vh);
      cnt += 1.0f;
    }
    if (has_tail) {
      add(vt);
      cnt += 1.0f;
    }
    float centre = 0.0f, rstd;
    if constexpr (kLayer) {
      const float mean_t = cnt > 0.0f ? sum / cnt : 0.0f;
      const float3 m =
          RowMergeMeanM2(make_float3(cnt, mean_t, fmaxf(sq - sum * mean_t, 0.0f)), scratch[i & 1]);
      centre = m.y;
      rstd = rsqrtf(m.z * inv_dim + p.epsilon);
    } else {
      rstd = rsqrtf(RowSumOneBarrier(sq, scratch[i & 1]) * inv_dim + p.epsilon);
    }
    if (tid == 0) {
      if constexpr (kLayer) p.mean[row] = shift + centre;
      p.rstd[row] = rstd;
    }
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = tid + int64_t(k) * step;
      if (v >= l.body) continue;
      float in[N], out[N];
      V::Unpack(raw[k], in);
#pragma unroll
      for (int e = 0; e < N; ++e) out[e] = ((in[e] - shift) - centre) * rstd * sc[k][e] + bi[k][e];
      StoreRow(y + l.head + v * N, V::Pack(out), p.stream_rows);
    }
    if (has_head) y[tid] = FromF32<T>(((vh - shift) - centre) * rstd * sc_h + bi_h);
    if (has_tail) y[tail_col] = FromF32<T>(((vt - shift) - centre) * rstd * sc_t + bi_t);
  }
}

}  // namespace jaxdnn::norms
