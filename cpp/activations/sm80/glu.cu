// Gated linear units on CUDA: out = value * f(gate) and its backward, one
// pass each. Value and gate rows sit `in_stride` elements apart: the two
// halves of one array's rows, or two arrays. Threads own 16-byte vector
// columns and walk rows as bias_act's kernels do.
#include "activations/sm80/activation_launch.h"
#include "activations/sm80/elementwise_grid.cuh"

namespace jaxdnn::activations {
namespace {

template <typename T, Act A, bool kVec>
__global__ void __launch_bounds__(256)
    GluFwdKernel(const T* __restrict__ value, const T* __restrict__ gate, T* __restrict__ out, int64_t rows,
                 int64_t cols, int64_t in_stride, float param) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (col >= cols) return;
  using Raw = Loads<typename P::Raw, 2>;
  WalkRows<Raw>(
      int64_t(blockIdx.y) * blockDim.y + threadIdx.y, rows, int64_t(gridDim.y) * blockDim.y,
      [&](int64_t r) {
        return Raw{{P::Load(value + r * in_stride + col), P::Load(gate + r * in_stride + col)}};
      },
      [&](int64_t r, const Raw& raw) {
        float v[N], z[N];
        P::Unpack(raw.op[0], v);
        P::Unpack(raw.op[1], z);
#pragma unroll
        for (int e = 0; e < N; ++e) v[e] *= Apply<A>(z[e], param);
        P::Store(out + r * cols + col, v);
      });
}

template <typename T, Act A, bool kVec>
__global__ void __launch_bounds__(256)
    GluBwdKernel(const T* __restrict__ dout, const T* __restrict__ value, const T* __restrict__ gate,
                 T* __restrict__ dvalue, T* __restrict__ dgate, int64_t rows, int64_t cols, int64_t in_stride,
                 float param) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (col >= cols) return;
  using Raw = Loads<typename P::Raw, 3>;
  WalkRows<Raw>(
      int64_t(blockIdx.y) * blockDim.y + threadIdx.y, rows, int64_t(gridDim.y) * blockDim.y,
      [&](int64_t r) {
        return Raw{{P::Load(dout + r * cols + col), P::Load(value + r * in_stride + col),
                    P::Load(gate + r * in_stride + col)}};
      },
      [&](int64_t r, const Raw& raw) {
        float g[N], v[N], z[N];
        P::Unpack(raw.op[0], g);
        P::Unpack(raw.op[1], v);
        P::Unpack(raw.op[2], z);
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const float dz = Backprop<A>(z[e], g[e] * v[e], param);
          v[e] = g[e] * Apply<A>(z[e], param);
          z[e] = dz;
        }
        P::Store(dvalue + r * in_stride + col, v);
        P::Store(dgate + r * in_stride + col, z);
      });
}

}  // namespace

LaunchStatus GluFwdCuda(const GluFwdArgs& p, cudaStream_t stream) {
  if (p.shape.rows == 0 || p.shape.cols == 0) return cudaSuccess;
  const GridPlan g = ElementwiseGrid(p.shape.rows, p.shape.cols, p.in_stride, ffi::ByteWidth(p.dtype));
  return ByDtypeAct(p.dtype, p.act, [&](auto t, auto a) -> LaunchStatus {
    using T = decltype(t);
    constexpr Act A = decltype(a)::value;
    auto kernel = g.vec ? GluFwdKernel<T, A, true> : GluFwdKernel<T, A, false>;
    kernel<<<Grid(g), Block(g), 0, stream>>>(static_cast<const T*>(p.value), static_cast<const T*>(p.gate),
                                             static_cast<T*>(p.out), p.shape.rows, p.shape.cols, p.in_stride,
                                             p.param);
    return Checked();
  });
}

LaunchStatus GluBwdCuda(const GluBwdArgs& p, cudaStream_t stream) {
  if (p.shape.rows == 0 || p.shape.cols == 0) return cudaSuccess;
  const GridPlan g = ElementwiseGrid(p.shape.rows, p.shape.cols, p.in_stride, ffi::ByteWidth(p.dtype));
  return ByDtypeAct(p.dtype, p.act, [&](auto t, auto a) -> LaunchStatus {
    using T = decltype(t);
    constexpr Act A = decltype(a)::value;
    auto kernel = g.vec ? GluBwdKernel<T, A, true> : GluBwdKernel<T, A, false>;
    kernel<<<Grid(g), Block(g), 0, stream>>>(static_cast<const T*>(p.dout), static_cast<const T*>(p.value),
                                             static_cast<const T*>(p.gate), static_cast<T*>(p.dvalue),
                                             static_cast<T*>(p.dgate), p.shape.rows, p.shape.cols,
                                             p.in_stride, p.param);
    return Checked();
  });
}

}  // namespace jaxdnn::activations
