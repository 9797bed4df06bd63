// The CUTLASS 3 sm90 implicit-GEMM weight-gradient kernels, included only by
// the tile translation units (conv_wgrad_sm90_m*.cu), which instantiate
// JAXDNN_CONV_WGRAD_SM90_TILE(kTile) for both dtypes.
// GEMM view: M = C_out, N = (C_in, S, R, T) walked as ceil(C_in/64) channel
// blocks per tap, K = N * Z * P * Q (output positions): dz K-major tiled, x
// through the TMA's im2col mode. M and N are the weights' extents, small next
// to K, so one GEMM would leave most SMs idle: the batch is cut into parts
// (WgradParts), each a whole CUTLASS problem with its own TMA descriptors,
// and one launch runs them all (blockIdx.z picks the part's parameters;
// CUTLASS's conv kernels ignore blockIdx.z). Each part writes a float32
// partial through the register epilogue; the launcher sums them in order.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/kernel_hardware_info.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/conv/convolution.h"
#include "cutlass/conv/convnd_problem_shape.hpp"
#include "cutlass/conv/dispatch_policy.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"

#include "conv/sm90/conv_grad_sm90_plan.h"

namespace jaxdnn::conv::sm90 {

template <bool kHalf>
using WgradElement = std::conditional_t<kHalf, cutlass::half_t, cutlass::bfloat16_t>;

// The kernel for 16-bit element T and a CTA tile of kTileM output channels x
// 64 input channels (of one tap).
template <class T, int kTileM>
struct WgradSm90 {
  static constexpr int kAlign = 8;  // 16-byte TMA rows of T
  using TileShape = cute::Shape<cute::Int<kTileM>, cute::Shape<cute::_64>, cute::Shape<cute::_64>>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  // Register epilogue (as CUTLASS's sm90 wgrad tests use) storing float32
  // partials [C_out, T, R, S, C_in]; void C: nothing read.
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::TensorKCSRT, 4,
      float, cutlass::layout::TensorKCSRT, 4, cutlass::epilogue::NoSmemWarpSpecialized>::CollectiveOp;
  using Mainloop = typename cutlass::conv::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kWgrad, T,
      cutlass::layout::TensorNDHWC, kAlign, T, cutlass::layout::TensorNDHWC, kAlign, float, TileShape,
      ClusterShape,
      cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::conv::KernelImplicitTmaWarpSpecializedSm90>::CollectiveOp;
  using Problem = cutlass::conv::ConvProblemShape<cutlass::conv::Operator::kWgrad, 3>;
  using Kernel = cutlass::conv::kernel::ConvUniversal<Problem, Mainloop, Epilogue>;
  using Params = typename Kernel::Params;
  // The parts' parameters travel together in the kernel parameters (each
  // holds its TMA descriptors), within Hopper's 32 KB (CUDA 12.1+).
  static constexpr int kPartsPerLaunch = kWgradPartsPerLaunch;
  struct PartParams {
    Params part[kPartsPerLaunch];
  };
  static_assert(sizeof(PartParams) <= 32000, "the wgrad parts' parameters exceed 32 KB");
};

// One launch of up to kPartsPerLaunch parts: the grid's z picks the part.
template <class Sm90>
__global__ void __launch_bounds__(Sm90::Kernel::MaxThreadsPerBlock, Sm90::Kernel::MinBlocksPerMultiprocessor)
    WgradPartsKernel(const __grid_constant__ typename Sm90::PartParams params) {
  extern __shared__ char smem[];
  typename Sm90::Kernel op;
  op(params.part[blockIdx.z], smem);
}

template <class T, int kTileM>
typename WgradSm90<T, kTileM>::Kernel::Arguments MakeWgradArguments(const GradProblem& pr, int batch,
                                                                    const void* x, const void* dz,
                                                                    float* partial) {
  using Kernel = typename WgradSm90<T, kTileM>::Kernel;
  typename WgradSm90<T, kTileM>::Problem shape(
      cutlass::conv::Mode::kCrossCorrelation, {batch, pr.act[1], pr.act[2], pr.act[3], pr.act[4]},
      {pr.flt[0], pr.flt[1], pr.flt[2], pr.flt[3], pr.flt[4]}, {pr.lo[0], pr.lo[1], pr.lo[2]},
      {pr.hi[0], pr.hi[1], pr.hi[2]}, {pr.stride[0], pr.stride[1], pr.stride[2]},
      {pr.dil[0], pr.dil[1], pr.dil[2]}, 1);
  // D: (K, (C, S, R, T)) from the packed [K, T, R, S, C].
  typename Kernel::StrideD dd{};
  cute::get<0>(dd) = shape.stride_C[0];
  cute::get<1, 1>(dd) = shape.stride_C[3];
  cute::get<1, 2>(dd) = shape.stride_C[2];
  cute::get<1, 3>(dd) = shape.stride_C[1];
  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = shape;
  args.mainloop.ptr_A = static_cast<const T*>(dz);
  args.mainloop.ptr_B = static_cast<const T*>(x);
  args.epilogue.thread.alpha = 1.0f;  // alpha is applied once, to the sum of the parts
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.ptr_D = partial;
  args.epilogue.dD = dd;
  return args;
}

template <bool kHalf, int kTile>
bool WgradImplementable(const GradProblem& pr) {
  using T = WgradElement<kHalf>;
  const auto args = MakeWgradArguments<T, kTile>(pr, pr.act[0], nullptr, nullptr, nullptr);
  return WgradSm90<T, kTile>::Kernel::can_implement(args);
}

template <bool kHalf, int kTile>
LaunchStatus WgradLaunch(const GradProblem& pr, const WgradParts& parts, const void* x, const void* dz,
                         float* partials, cudaStream_t stream) {
  using T = WgradElement<kHalf>;
  using Sm90 = WgradSm90<T, kTile>;
  using Kernel = typename Sm90::Kernel;
  constexpr int kSmem = Kernel::SharedStorageSize;
  auto* kernel = &WgradPartsKernel<Sm90>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  for (int first = 0; first < parts.count; first += Sm90::kPartsPerLaunch) {
    const int count = std::min(Sm90::kPartsPerLaunch, parts.count - first);
    typename Sm90::PartParams params;
    dim3 grid;
    for (int i = 0; i < count; ++i) {
      const int p = first + i;
      const int64_t n0 = int64_t(p) * parts.per_part;
      const int n = int(std::min<int64_t>(parts.per_part, parts.batch - n0));
      const auto args = MakeWgradArguments<T, kTile>(pr, n, static_cast<const T*>(x) + n0 * parts.x_step,
                                                     static_cast<const T*>(dz) + n0 * parts.dz_step,
                                                     partials + p * parts.partial_elems);
      if (Kernel::get_workspace_size(args) != 0) {
        return LaunchStatus::Refused("conv_wgrad_sm90: this CUTLASS's wgrad kernel asks for a workspace");
      }
      params.part[i] = Kernel::to_underlying_arguments(args, nullptr);
      // The tile grid depends on M and N only, the same for every part.
      grid = Kernel::get_grid_shape(params.part[i]);
    }
    grid.z = unsigned(count);
    kernel<<<grid, Kernel::get_block_shape(), kSmem, stream>>>(params);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace jaxdnn::conv::sm90

#define JAXDNN_CONV_WGRAD_SM90_ONE(HALF, M)                                                      \
  template bool WgradImplementable<HALF, M>(const GradProblem&);                                 \
  template LaunchStatus WgradLaunch<HALF, M>(const GradProblem&, const WgradParts&, const void*, \
                                             const void*, float*, cudaStream_t);
#define JAXDNN_CONV_WGRAD_SM90_TILE(M) \
  namespace jaxdnn::conv::sm90 {       \
  JAXDNN_CONV_WGRAD_SM90_ONE(false, M) \
  JAXDNN_CONV_WGRAD_SM90_ONE(true, M)  \
  }
