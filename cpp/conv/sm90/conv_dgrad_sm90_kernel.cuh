// The CUTLASS 3 sm90 implicit-GEMM data-gradient kernels, included only by
// the tile translation units (conv_dgrad_sm90_n*.cu), which instantiate
// JAXDNN_CONV_DGRAD_SM90_TILE(kTile) for both dtypes.
// GEMM view: M = N * D * H * W (input positions), N = C_in, K = (C_out, S,
// R, T) walked as ceil(C_out/64) channel blocks per tap; dz is read through
// the TMA's im2col mode with negated filter offsets (the flipped window), the
// filter K-major tiled. CUTLASS's sm90 dgrad has no strided mode (the L mode
// it would use is ignored by the non-persistent kernel), so the plan serves
// stride 1 only. Epilogue: dx = alpha * acc, no source operand.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

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
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"
#include "cutlass/device_kernel.h"

#include "conv/sm90/conv_grad_sm90_plan.h"

namespace jaxdnn::conv::sm90 {

template <bool kHalf>
using GradElement = std::conditional_t<kHalf, cutlass::half_t, cutlass::bfloat16_t>;

// The kernel for 16-bit element T and a CTA tile of 128 input positions x
// kTileN input channels.
template <class T, int kTileN>
struct DgradSm90 {
  static constexpr int kAlign = 8;  // elements in 16 bytes
  using Layout = cutlass::layout::TensorNDHWC;
  using TileShape = cute::Shape<cute::_128, cute::Int<kTileN>, cute::Shape<cute::_64>>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  // void C: no source tensor, no shared memory for it.
  using Fusion = cutlass::epilogue::fusion::LinearCombination<T, float, void, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, Layout, kAlign, T, Layout, kAlign,
      cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::conv::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kDgrad, T, Layout, kAlign,
      T, Layout, kAlign, float, TileShape, ClusterShape,
      cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::conv::KernelImplicitTmaWarpSpecializedSm90>::CollectiveOp;
  using Problem = cutlass::conv::ConvProblemShape<cutlass::conv::Operator::kDgrad, 3>;
  using Kernel = cutlass::conv::kernel::ConvUniversal<Problem, Mainloop, Epilogue>;
};

template <class T, int kTileN>
typename DgradSm90<T, kTileN>::Kernel::Arguments MakeDgradArguments(const GradProblem& pr, float alpha,
                                                                    const void* dz, const void* wt,
                                                                    void* dx) {
  using Kernel = typename DgradSm90<T, kTileN>::Kernel;
  // The forward's shapes: CUTLASS takes x's (here dx's) and derives dy's.
  typename DgradSm90<T, kTileN>::Problem shape(
      cutlass::conv::Mode::kCrossCorrelation, {pr.act[0], pr.act[1], pr.act[2], pr.act[3], pr.act[4]},
      {pr.flt[0], pr.flt[1], pr.flt[2], pr.flt[3], pr.flt[4]}, {pr.lo[0], pr.lo[1], pr.lo[2]},
      {pr.hi[0], pr.hi[1], pr.hi[2]}, {pr.stride[0], pr.stride[1], pr.stride[2]},
      {pr.dil[0], pr.dil[1], pr.dil[2]}, 1);
  // D = dx: M mode (w, h, d, n) innermost first, from the packed [N, D, H, W, C].
  typename Kernel::StrideD dd{};
  cute::for_each(cute::make_seq<4>{}, [&](auto i) { cute::get<0, i>(dd) = shape.stride_C[3 - i]; });
  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = shape;
  args.mainloop.ptr_A = static_cast<const T*>(dz);
  args.mainloop.ptr_B = static_cast<const T*>(wt);
  args.epilogue.thread.alpha = alpha;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.ptr_D = static_cast<T*>(dx);
  args.epilogue.dD = dd;
  return args;
}

template <bool kHalf, int kTile>
bool DgradImplementable(const GradProblem& pr) {
  using T = GradElement<kHalf>;
  const auto args = MakeDgradArguments<T, kTile>(pr, 1.0f, nullptr, nullptr, nullptr);
  return DgradSm90<T, kTile>::Kernel::can_implement(args);
}

template <bool kHalf, int kTile>
LaunchStatus DgradLaunch(const GradProblem& pr, float alpha, const void* dz, const void* wt, void* dx,
                         cudaStream_t stream) {
  using T = GradElement<kHalf>;
  using Kernel = typename DgradSm90<T, kTile>::Kernel;
  const auto args = MakeDgradArguments<T, kTile>(pr, alpha, dz, wt, dx);
  // The non-persistent kernel keeps no workspace; a CUTLASS that wants one
  // would need it sized by the plan.
  if (Kernel::get_workspace_size(args) != 0) {
    return LaunchStatus::Refused("conv_dgrad_sm90: this CUTLASS's dgrad kernel asks for a workspace");
  }
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);
  constexpr int kSmem = Kernel::SharedStorageSize;
  auto* kernel = &cutlass::device_kernel<Kernel>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  kernel<<<Kernel::get_grid_shape(params), Kernel::get_block_shape(), kSmem, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace jaxdnn::conv::sm90

#define JAXDNN_CONV_DGRAD_SM90_ONE(HALF, N)                                                              \
  template bool DgradImplementable<HALF, N>(const GradProblem&);                                         \
  template LaunchStatus DgradLaunch<HALF, N>(const GradProblem&, float, const void*, const void*, void*, \
                                             cudaStream_t);
#define JAXDNN_CONV_DGRAD_SM90_TILE(N) \
  namespace jaxdnn::conv::sm90 {       \
  JAXDNN_CONV_DGRAD_SM90_ONE(false, N) \
  JAXDNN_CONV_DGRAD_SM90_ONE(true, N)  \
  }
