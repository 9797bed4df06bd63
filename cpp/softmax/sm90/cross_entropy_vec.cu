// Cross-entropy on 16-byte vectors (formulas in softmax/problem.h). The
// forward streams each row once, four vectors a thread at a time, keeping
// an online (max, sum of exp) pair and the row's total, merged over the
// row's threads in fixed order; the backward needs no reduction (the
// forward's lse gives every probability), so it is elementwise over
// chunks of rows, one read of the logits and one write of dlogits.
#include <algorithm>

#include "softmax/sm90/cluster_rows.cuh"
#include "softmax/sm90/cross_entropy_vec.h"
#include "softmax/sm90/row_launch.h"

namespace jaxdnn::softmax {

// A row's forward partials: the (max, sum of exp) pair and the sum of logits.
struct CeParts {
  MaxSum ms;
  float total;
};
__device__ inline CeParts Merge(CeParts a, CeParts b) { return {Merge(a.ms, b.ms), a.total + b.total}; }
__device__ inline CeParts ShflXor(CeParts v, int o) { return {ShflXor(v.ms, o), ShflXor(v.total, o)}; }
template <>
__device__ inline CeParts Empty<CeParts>() {
  return {Empty<MaxSum>(), 0.f};
}

namespace {

constexpr int kChunk = 4;         // vectors a thread loads at once
constexpr int kBwdThreads = 256;  // backward: threads of a CTA, kChunk vectors each

template <typename T>
__global__ void __launch_bounds__(kRowThreads) CrossEntropyFwdVecKernel(CrossEntropyFwdArgs p) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  __shared__ CeParts warp_slots[32];
  const int64_t cols = p.shape.cols, nvec = cols / N;
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < p.shape.rows;
  const T* x = static_cast<const T*>(p.logits) + (live ? row : 0) * cols;
  float m = -INFINITY, s = 0.f, total = 0.f;
  for (int64_t j0 = live ? threadIdx.x : nvec; j0 < nvec; j0 += kChunk * blockDim.x) {
    uint4 raw[kChunk];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const int64_t j = j0 + int64_t(k) * blockDim.x;
      raw[k] = j < nvec ? LoadStream(x + j * N) : make_uint4(0, 0, 0, 0);
    }
    float cm = -INFINITY;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      if (j0 + int64_t(k) * blockDim.x >= nvec) continue;
      float v[N];
      V::Unpack(raw[k], v);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        cm = fmaxf(cm, v[e]);
        total += v[e];
      }
    }
    if (cm > m) {  // rescale the sum to the new maximum (an empty sum stays 0)
      s = s == 0.f ? 0.f : s * Exp2((m - cm) * kLog2e);
      m = cm;
    }
    const float ml = m * kLog2e;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      if (j0 + int64_t(k) * blockDim.x >= nvec) continue;
      float v[N];
      V::Unpack(raw[k], v);
#pragma unroll
      for (int e = 0; e < N; ++e) s += v[e] != -INFINITY ? Exp2(fmaf(v[e], kLog2e, -ml)) : 0.f;
    }
  }
  const CeParts t = RowReduce(CeParts{{m, s}, total}, warp_slots, static_cast<CeParts*>(nullptr), 1);
  if (!live || threadIdx.x != 0) return;
  // exp(inf - inf), or every logit -inf: NaN, as the reference.
  const float sum = (t.ms.m == INFINITY || t.ms.m == -INFINITY) ? NAN : t.ms.s;
  const float lse = t.ms.m + __logf(sum);
  p.lse[row] = lse;
  const int32_t y = p.labels[row];
  switch (KindOf(y, cols, p.has_ignore, p.ignore_index)) {
    case LabelKind::kIgnored: p.loss[row] = 0.f; break;
    case LabelKind::kInvalid: p.loss[row] = NAN; break;
    case LabelKind::kValid:
      p.loss[row] = lse - (1.f - p.smoothing) * V::Load1(x + y) -
                    (p.smoothing != 0.f ? p.smoothing * (t.total / float(cols)) : 0.f) + p.z_loss * lse * lse;
      break;
  }
}

// Block b covers vectors [c * per, (c + 1) * per) of row b / blocks_per_row
// (c = b % blocks_per_row, per = kChunk * kBwdThreads).
template <typename T>
__global__ void __launch_bounds__(kBwdThreads)
    CrossEntropyBwdVecKernel(CrossEntropyBwdArgs p, int64_t blocks_per_row) {
  using V = Vec16<T>;
  constexpr int N = V::kElems;
  const int64_t cols = p.shape.cols, nvec = cols / N;
  const int64_t row = blockIdx.x / blocks_per_row;
  const int64_t first = (blockIdx.x % blocks_per_row) * (kChunk * kBwdThreads);
  const int32_t y = p.labels[row];
  const LabelKind kind = KindOf(y, cols, p.has_ignore, p.ignore_index);
  const float g = p.g[row], lse = p.lse[row];
  const float pscale = g * (1.f + 2.f * p.z_loss * lse), ll = lse * kLog2e;
  const float spread = g * (p.smoothing / float(cols)), hit = g * (1.f - p.smoothing);
  const T* x = static_cast<const T*>(p.logits) + row * cols;
  T* dx = static_cast<T*>(p.dlogits) + row * cols;
  uint4 raw[kChunk];
#pragma unroll
  for (int k = 0; k < kChunk; ++k) {
    const int64_t j = first + threadIdx.x + k * kBwdThreads;
    raw[k] = j < nvec ? LoadStream(x + j * N) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int k = 0; k < kChunk; ++k) {
    const int64_t j = first + threadIdx.x + k * kBwdThreads;
    if (j >= nvec) continue;
    float v[N], out[N];
    V::Unpack(raw[k], v);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const float d = pscale * Exp2(fmaf(v[e], kLog2e, -ll)) - spread - (j * N + e == y ? hit : 0.f);
      out[e] = kind == LabelKind::kValid ? d : kind == LabelKind::kIgnored ? 0.f : NAN;
    }
    StoreStream(dx + j * N, V::Pack(out));
  }
}

}  // namespace

bool CrossEntropyVecFits(int64_t rows, int64_t cols, int elem_bytes, bool aligned) {
  const int elems = 16 / elem_bytes;
  if (!aligned || cols % elems != 0) return false;
  const int64_t per = kChunk * kBwdThreads;
  const int64_t blocks_per_row = CeilDiv(cols / elems, per);
  return rows * blocks_per_row <= 0x7fffffff;  // the backward's grid (the forward's is smaller)
}

cudaError_t CrossEntropyFwdVecCuda(const CrossEntropyFwdArgs& p, cudaStream_t stream) {
  return ByDtype(p.dtype, [&](auto t) {
    using T = decltype(t);
    const int64_t nvec = p.shape.cols / Vec16<T>::kElems;
    RowSplit s;  // threads per row: a chunk of vectors each, up to kRowThreads
    s.tpr = int(std::min<int64_t>(kRowThreads, (CeilDiv(nvec, kChunk) + 31) / 32 * 32));
    s.rpc = s.tpr < 256 ? 256 / s.tpr : 1;
    return LaunchRows(CrossEntropyFwdVecKernel<T>, s, p.shape.rows, stream, p);
  });
}

cudaError_t CrossEntropyBwdVecCuda(const CrossEntropyBwdArgs& p, cudaStream_t stream) {
  return ByDtype(p.dtype, [&](auto t) {
    using T = decltype(t);
    const int64_t blocks_per_row = CeilDiv(p.shape.cols / Vec16<T>::kElems, kChunk * kBwdThreads);
    RowSplit s;
    s.tpr = kBwdThreads;
    return LaunchClusters(CrossEntropyBwdVecKernel<T>, s, p.shape.rows * blocks_per_row, 0, stream, p,
                          blocks_per_row);
  });
}

}  // namespace jaxdnn::softmax
