// bias_act on CUDA: y = f(x + bias) and its backward with the bias gradient.
// Each thread owns one 16-byte vector (or element) column of the rows and
// walks rows, kUnroll at a time in flight, so a block's bias stays in
// registers. The backward sums its dx column into float32 registers, reduces
// the block's row lanes through shared memory in lane order, and writes one
// partial row per row chunk; a second kernel adds the partials in chunk
// order, so the gradient's bits never depend on scheduling.
#include "activations/sm80/activation_launch.h"
#include "activations/sm80/elementwise_grid.cuh"

namespace jaxdnn::activations {
namespace {

template <typename T, Act A, bool kVec>
__global__ void __launch_bounds__(256)
    BiasActFwdKernel(const T* __restrict__ x, const float* __restrict__ bias, T* __restrict__ y, int64_t rows,
                     int64_t cols, float param) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  const int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u * N >= cols) return;
  const int64_t col = u * N;
  float b[N];
#pragma unroll
  for (int e = 0; e < N; ++e) b[e] = bias ? bias[col + e] : 0.0f;
  using Raw = typename P::Raw;
  WalkRows<Raw>(
      int64_t(blockIdx.y) * blockDim.y + threadIdx.y, rows, int64_t(gridDim.y) * blockDim.y,
      [&](int64_t r) { return P::Load(x + r * cols + col); },
      [&](int64_t r, const Raw& raw) {
        float v[N];
        P::Unpack(raw, v);
#pragma unroll
        for (int e = 0; e < N; ++e) v[e] = Apply<A>(v[e] + b[e], param);
        P::Store(y + r * cols + col, v);
      });
}

// partials == nullptr: no bias gradient, rows strided over the grid as in
// the forward. Otherwise block row blockIdx.y takes the chunk of
// `chunk_rows` rows and writes partials[blockIdx.y, :].
template <typename T, Act A, bool kVec>
__global__ void __launch_bounds__(256)
    BiasActBwdKernel(const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ bias,
                     T* __restrict__ dx, float* __restrict__ partials, int64_t rows, int64_t cols,
                     int64_t chunk_rows, float param) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  __shared__ float lanes[256 * N];
  const int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool live = u * N < cols;
  const int64_t col = u * N;
  float b[N], acc[N];
#pragma unroll
  for (int e = 0; e < N; ++e) {
    b[e] = live && bias ? bias[col + e] : 0.0f;
    acc[e] = 0.0f;
  }
  int64_t first, last, stride;
  if (partials) {
    first = int64_t(blockIdx.y) * chunk_rows + threadIdx.y;
    last = min(rows, (int64_t(blockIdx.y) + 1) * chunk_rows);
    stride = blockDim.y;
  } else {
    first = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
    last = rows;
    stride = int64_t(gridDim.y) * blockDim.y;
  }
  if (live) {
    using Raw = Loads<typename P::Raw, 2>;
    WalkRows<Raw>(
        first, last, stride,
        [&](int64_t r) { return Raw{{P::Load(dy + r * cols + col), P::Load(x + r * cols + col)}}; },
        [&](int64_t r, const Raw& raw) {
          float g[N], v[N];
          P::Unpack(raw.op[0], g);
          P::Unpack(raw.op[1], v);
#pragma unroll
          for (int e = 0; e < N; ++e) {
            v[e] = Backprop<A>(v[e] + b[e], g[e], param);
            acc[e] += v[e];
          }
          P::Store(dx + r * cols + col, v);
        });
  }
  if (!partials) return;
  float sums[1][N];
#pragma unroll
  for (int e = 0; e < N; ++e) sums[0][e] = acc[e];
  BlockColumnSums<1, N>(sums, lanes, live, partials + int64_t(blockIdx.y) * cols + col, cols);
}

}  // namespace

LaunchStatus BiasActFwdCuda(const BiasActFwdArgs& p, cudaStream_t stream) {
  if (p.shape.rows == 0 || p.shape.cols == 0) return cudaSuccess;
  const int64_t item = ffi::ByteWidth(p.dtype);
  const GridPlan g = ElementwiseGrid(p.shape.rows, p.shape.cols, p.shape.cols, item);
  return ByDtypeAct(p.dtype, p.act, [&](auto t, auto a) -> LaunchStatus {
    using T = decltype(t);
    constexpr Act A = decltype(a)::value;
    auto kernel = g.vec ? BiasActFwdKernel<T, A, true> : BiasActFwdKernel<T, A, false>;
    kernel<<<Grid(g), Block(g), 0, stream>>>(static_cast<const T*>(p.x), p.bias, static_cast<T*>(p.y),
                                             p.shape.rows, p.shape.cols, p.param);
    return Checked();
  });
}

LaunchStatus BiasActBwdCuda(const BiasActBwdArgs& p, cudaStream_t stream) {
  const int64_t item = ffi::ByteWidth(p.dtype);
  const bool with_bias = p.bias != nullptr;
  if (with_bias && (p.shape.rows == 0 || p.shape.cols == 0)) {
    return cudaMemsetAsync(p.dbias, 0, sizeof(float) * p.shape.cols, stream);
  }
  if (p.shape.rows == 0 || p.shape.cols == 0) return cudaSuccess;
  const GridPlan g = with_bias ? MakeColumnSumPlan(p.shape.rows, p.shape.cols, item)
                               : ElementwiseGrid(p.shape.rows, p.shape.cols, p.shape.cols, item);
  if (with_bias && p.workspace_elems < g.row_blocks * p.shape.cols) {
    return LaunchStatus::Refused("the workspace is smaller than the plan's bias-gradient partials");
  }
  const int64_t chunk_rows = CeilDiv(p.shape.rows, g.row_blocks);
  float* partials = with_bias ? p.partials : nullptr;
  LaunchStatus s = ByDtypeAct(p.dtype, p.act, [&](auto t, auto a) -> LaunchStatus {
    using T = decltype(t);
    constexpr Act A = decltype(a)::value;
    auto kernel = g.vec ? BiasActBwdKernel<T, A, true> : BiasActBwdKernel<T, A, false>;
    kernel<<<Grid(g), Block(g), 0, stream>>>(static_cast<const T*>(p.dy), static_cast<const T*>(p.x), p.bias,
                                             static_cast<T*>(p.dx), partials, p.shape.rows, p.shape.cols,
                                             chunk_rows, p.param);
    return Checked();
  });
  if (!s.ok() || !with_bias) return s;
  LaunchColumnPartials<1>(p.partials, p.dbias, nullptr, g.row_blocks, p.shape.cols, stream);
  return Checked();
}

}  // namespace jaxdnn::activations
