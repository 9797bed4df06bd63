// The CUTLASS 3 sm90 implicit-GEMM forward convolution kernels, included
// only by the tile translation units (conv_fprop_sm90_n*.cu), which
// instantiate JAXDNN_CONV_FPROP_SM90_TILE(kTileN) for both dtypes.
// GEMM view: M = N * outD * outH * outW (output positions, x read through the
// TMA's im2col mode), N = C_out, K = (C_in, S, R, T) walked as ceil(C_in/64)
// channel blocks per tap; CUTLASS's non-persistent warp-specialized schedule
// (the only sm90 conv schedule), cluster 1x1x1, stages filling the shared
// memory the TMA epilogue leaves.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
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
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/conv/kernel/conv_universal.hpp"
#include "cutlass/device_kernel.h"

#include "conv/sm90/conv_fprop_sm90_plan.h"

namespace jaxdnn::conv::sm90 {

template <bool kHalf>
using Element = std::conditional_t<kHalf, cutlass::half_t, cutlass::bfloat16_t>;

// The kernel for 16-bit element T (cutlass::bfloat16_t or cutlass::half_t)
// and a CTA tile of 128 output positions x kTileN output channels.
template <class T, int kTileN>
struct FpropSm90 {
  static constexpr int kAlign = 8;  // elements in 16 bytes: TMA's stride and address unit
  using Layout = cutlass::layout::TensorNDHWC;
  // K tile as a rank-1 shape: it tiles only the channel mode of (C, S, R, T).
  using TileShape = cute::Shape<cute::_128, cute::Int<kTileN>, cute::Shape<cute::_64>>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  // D = clamp(alpha * acc + bias + beta * C, lo, hi): identity, relu and relu6
  // are clamp bounds, so one kernel serves the three at run time. Bias is
  // float32 (the launcher widens it), C (the residual) and D are T.
  using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<cutlass::epilogue::thread::Clamp, T,
                                                                    float, float, T, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, T, Layout, kAlign, T, Layout, kAlign,
      cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::conv::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kFprop, T, Layout, kAlign,
      T, Layout, kAlign, float, TileShape, ClusterShape,
      cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::conv::KernelImplicitTmaWarpSpecializedSm90>::CollectiveOp;
  using Problem = cutlass::conv::ConvProblemShape<cutlass::conv::Operator::kFprop, 3>;
  using Kernel = cutlass::conv::kernel::ConvUniversal<Problem, Mainloop, Epilogue>;
};

template <class T, int kTileN>
typename FpropSm90<T, kTileN>::Kernel::Arguments MakeArguments(const Plan& pl, float alpha, float beta,
                                                               const void* x, const void* wt,
                                                               const float* bias, const void* c, void* d) {
  using Kernel = typename FpropSm90<T, kTileN>::Kernel;
  typename FpropSm90<T, kTileN>::Problem shape(
      cutlass::conv::Mode::kCrossCorrelation, {pl.act[0], pl.act[1], pl.act[2], pl.act[3], pl.act[4]},
      {pl.flt[0], pl.flt[1], pl.flt[2], pl.flt[3], pl.flt[4]}, {pl.lo[0], pl.lo[1], pl.lo[2]},
      {pl.hi[0], pl.hi[1], pl.hi[2]}, {pl.stride[0], pl.stride[1], pl.stride[2]},
      {pl.dil[0], pl.dil[1], pl.dil[2]}, 1);
  // C and D: M mode (q, p, z, n) innermost first, from the packed [N, Z, P, Q, K].
  typename Kernel::StrideC dc{};
  typename Kernel::StrideD dd{};
  cute::for_each(cute::make_seq<4>{}, [&](auto i) {
    cute::get<0, i>(dc) = shape.stride_C[3 - i];
    cute::get<0, i>(dd) = shape.stride_C[3 - i];
  });
  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = shape;
  args.mainloop.ptr_A = static_cast<const T*>(x);
  args.mainloop.ptr_B = static_cast<const T*>(wt);
  auto& t = args.epilogue.thread;
  t.alpha = alpha;
  t.beta = beta;
  t.bias_ptr = bias;  // null: a zero bias, nothing read
  t.activation.lower_bound = pl.clamp_lo;
  t.activation.upper_bound = pl.clamp_hi;
  args.epilogue.ptr_C = static_cast<const T*>(c);
  args.epilogue.dC = dc;
  args.epilogue.ptr_D = static_cast<T*>(d);
  args.epilogue.dD = dd;
  return args;
}

template <bool kHalf, int kTileN>
size_t CutlassWorkspace(const Plan& pl) {
  using T = Element<kHalf>;
  const auto args = MakeArguments<T, kTileN>(pl, 1.0f, 0.0f, nullptr, nullptr, nullptr, nullptr, nullptr);
  return RoundUp(FpropSm90<T, kTileN>::Kernel::get_workspace_size(args));
}

template <bool kHalf, int kTileN>
bool Implementable(const Plan& pl, float alpha, float beta) {
  using T = Element<kHalf>;
  const auto args = MakeArguments<T, kTileN>(pl, alpha, beta, nullptr, nullptr, nullptr, nullptr, nullptr);
  return FpropSm90<T, kTileN>::Kernel::can_implement(args);
}

template <bool kHalf, int kTileN>
LaunchStatus Launch(const Plan& pl, float alpha, float beta, const void* x, const void* wt, const float* bias,
                    const void* c, void* d, void* cutlass_workspace, cudaStream_t stream) {
  using T = Element<kHalf>;
  using Kernel = typename FpropSm90<T, kTileN>::Kernel;
  const auto args = MakeArguments<T, kTileN>(pl, alpha, beta, x, wt, bias, c, d);
  if (Kernel::initialize_workspace(args, cutlass_workspace, stream) != cutlass::Status::kSuccess) {
    return LaunchStatus::Refused("conv_fprop_sm90: CUTLASS workspace initialization failed");
  }
  // TMA descriptors (encoded on the host) travel in the kernel parameters.
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, cutlass_workspace);
  constexpr int kSmem = Kernel::SharedStorageSize;
  auto* kernel = &cutlass::device_kernel<Kernel>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  kernel<<<Kernel::get_grid_shape(params), Kernel::get_block_shape(), kSmem, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace jaxdnn::conv::sm90

// Explicit instantiations of one tile width's entry points, both dtypes.
#define JAXDNN_CONV_FPROP_SM90_ONE(HALF, N)                                                                \
  template size_t CutlassWorkspace<HALF, N>(const Plan&);                                                  \
  template bool Implementable<HALF, N>(const Plan&, float, float);                                         \
  template LaunchStatus Launch<HALF, N>(const Plan&, float, float, const void*, const void*, const float*, \
                                        const void*, void*, void*, cudaStream_t);
#define JAXDNN_CONV_FPROP_SM90_TILE(N) \
  namespace jaxdnn::conv::sm90 {       \
  JAXDNN_CONV_FPROP_SM90_ONE(false, N) \
  JAXDNN_CONV_FPROP_SM90_ONE(true, N)  \
  }
