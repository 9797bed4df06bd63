// The CUTLASS 3 sm90 persistent GEMM kernels of the 1x1 forward
// convolution, included only by the tile translation units
// (conv1x1_gemm_sm90_n*.cu), which instantiate
// JAXDNN_CONV1X1_GEMM_SM90_TILE(kTileN) for both dtypes.
// GEMM view of a channels-last 1x1 stride-1 convolution: M = N * positions
// (x's rows, [M, C_in] row-major), N = C_out, K = C_in; the weights
// [C_in, C_out] are B with N contiguous (an MN-major wgmma operand, so no
// transpose), y [M, C_out] row-major. TMA loads, wgmma, the cooperative
// warp-specialized schedule (two consumer warpgroups split the 128-row
// tile) on CUTLASS's persistent tile scheduler (one CTA per SM walking the
// tiles, rasterized along the longer side), the TMA epilogue with the sm90
// convolution's fusion (conv_fprop_sm90_kernel.cuh).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/kernel_hardware_info.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/device_kernel.h"

#include "conv/sm90/conv1x1_gemm_sm90_plan.h"

namespace jaxdnn::conv::sm90 {

template <bool kHalf>
using GemmElement = std::conditional_t<kHalf, cutlass::half_t, cutlass::bfloat16_t>;

// The kernel for 16-bit element T and a CTA tile of 128 output positions x
// kTileN output channels x 64 input channels; the 256-wide tile runs in
// clusters of 2 along M that share (multicast) the weights' loads.
template <class T, int kTileN>
struct Conv1x1GemmSm90 {
  static constexpr int kAlign = 8;            // elements in 16 bytes: TMA's stride and address unit
  using LayoutA = cutlass::layout::RowMajor;  // x [M, K]
  using LayoutB = cutlass::layout::RowMajor;  // w [K, N]: N contiguous
  using LayoutC = cutlass::layout::RowMajor;  // residual and y [M, N]
  using TileShape = cute::Shape<cute::_128, cute::Int<kTileN>, cute::_64>;
  using ClusterShape = cute::Shape<cute::Int<kTileN == 256 ? 2 : 1>, cute::_1, cute::_1>;
  // As the sm90 convolution: D = clamp(alpha * acc + bias + beta * C, lo,
  // hi), identity, relu and relu6 as clamp bounds; bias float32, C and D T.
  using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<cutlass::epilogue::thread::Clamp, T,
                                                                    float, float, T, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, T, LayoutC, kAlign, T, LayoutC, kAlign,
      cutlass::epilogue::TmaWarpSpecializedCooperative, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, LayoutA, kAlign, T, LayoutB, kAlign, float,
      TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Problem = cute::Shape<int, int, int, int>;  // M, N, K, L
  // No scheduler tag: the cooperative kernel's default, the persistent one.
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Problem, Mainloop, Epilogue>;
};

template <class T, int kTileN>
typename Conv1x1GemmSm90<T, kTileN>::Kernel::Arguments MakeGemmArguments(const GemmPlan& pl, float alpha,
                                                                         float beta, const void* x,
                                                                         const void* w, const float* bias,
                                                                         const void* c, void* d) {
  using Kernel = typename Conv1x1GemmSm90<T, kTileN>::Kernel;
  const int64_t m = pl.m, n = pl.n, k = pl.k;
  typename Kernel::StrideA sa{};  // (M, K, L): K contiguous
  cute::get<0>(sa) = k;
  cute::get<2>(sa) = m * k;
  typename Kernel::StrideB sb{};  // (N, K, L): N contiguous
  cute::get<1>(sb) = n;
  cute::get<2>(sb) = k * n;
  typename Kernel::StrideC sc{};  // (M, N, L): N contiguous
  cute::get<0>(sc) = n;
  cute::get<2>(sc) = m * n;
  typename Kernel::StrideD sd{};
  cute::get<0>(sd) = n;
  cute::get<2>(sd) = m * n;
  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = typename Conv1x1GemmSm90<T, kTileN>::Problem{pl.m, pl.n, pl.k, 1};
  args.mainloop.ptr_A = static_cast<const T*>(x);
  args.mainloop.dA = sa;
  args.mainloop.ptr_B = static_cast<const T*>(w);
  args.mainloop.dB = sb;
  auto& t = args.epilogue.thread;
  t.alpha = alpha;
  t.beta = beta;
  t.bias_ptr = bias;  // null: a zero bias, nothing read
  t.activation.lower_bound = pl.clamp_lo;
  t.activation.upper_bound = pl.clamp_hi;
  args.epilogue.ptr_C = static_cast<const T*>(c);
  args.epilogue.dC = sc;
  args.epilogue.ptr_D = static_cast<T*>(d);
  args.epilogue.dD = sd;
  return args;
}

template <bool kHalf, int kTileN>
size_t GemmCutlassWorkspace(const GemmPlan& pl) {
  using T = GemmElement<kHalf>;
  // The persistent scheduler's and this epilogue's workspaces do not depend
  // on the SM count (zero bytes in CUTLASS 4.2); RoundUp keeps the carve
  // 256-byte aligned whatever they become.
  const auto args = MakeGemmArguments<T, kTileN>(pl, 1.0f, 0.0f, nullptr, nullptr, nullptr, nullptr, nullptr);
  return RoundUp(Conv1x1GemmSm90<T, kTileN>::Kernel::get_workspace_size(args));
}

template <bool kHalf, int kTileN>
bool GemmImplementable(const GemmPlan& pl, float alpha, float beta) {
  using T = GemmElement<kHalf>;
  const auto args =
      MakeGemmArguments<T, kTileN>(pl, alpha, beta, nullptr, nullptr, nullptr, nullptr, nullptr);
  return Conv1x1GemmSm90<T, kTileN>::Kernel::can_implement(args);
}

template <bool kHalf, int kTileN>
LaunchStatus GemmLaunch(const GemmPlan& pl, float alpha, float beta, const void* x, const void* w,
                        const float* bias, const void* c, void* d, void* cutlass_workspace, int device,
                        int sm_count, cudaStream_t stream) {
  using T = GemmElement<kHalf>;
  using Gemm = Conv1x1GemmSm90<T, kTileN>;
  using Kernel = typename Gemm::Kernel;
  auto args = MakeGemmArguments<T, kTileN>(pl, alpha, beta, x, w, bias, c, d);
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sm_count;
  if (Kernel::initialize_workspace(args, cutlass_workspace, stream) != cutlass::Status::kSuccess) {
    return LaunchStatus::Refused("conv1x1_gemm_sm90: CUTLASS workspace initialization failed");
  }
  // TMA descriptors (encoded on the host) travel in the kernel parameters.
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, cutlass_workspace);
  constexpr int kSmem = Kernel::SharedStorageSize;
  auto* kernel = &cutlass::device_kernel<Kernel>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  // A cluster launch (also for clusters of one, so one path serves both):
  // the persistent grid is a whole number of clusters.
  cudaLaunchConfig_t config{};
  config.gridDim = Kernel::get_grid_shape(params);
  config.blockDim = Kernel::get_block_shape();
  config.dynamicSmemBytes = kSmem;
  config.stream = stream;
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = cute::size<0>(typename Gemm::ClusterShape{});
  cluster[0].val.clusterDim.y = cute::size<1>(typename Gemm::ClusterShape{});
  cluster[0].val.clusterDim.z = cute::size<2>(typename Gemm::ClusterShape{});
  config.attrs = cluster;
  config.numAttrs = 1;
  err = cudaLaunchKernelEx(&config, kernel, params);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace jaxdnn::conv::sm90

// Explicit instantiations of one tile width's entry points, both dtypes.
#define JAXDNN_CONV1X1_GEMM_SM90_ONE(HALF, N)                                                        \
  template size_t GemmCutlassWorkspace<HALF, N>(const GemmPlan&);                                    \
  template bool GemmImplementable<HALF, N>(const GemmPlan&, float, float);                           \
  template LaunchStatus GemmLaunch<HALF, N>(const GemmPlan&, float, float, const void*, const void*, \
                                            const float*, const void*, void*, void*, int, int,       \
                                            cudaStream_t);
#define JAXDNN_CONV1X1_GEMM_SM90_TILE(N) \
  namespace jaxdnn::conv::sm90 {         \
  JAXDNN_CONV1X1_GEMM_SM90_ONE(false, N) \
  JAXDNN_CONV1X1_GEMM_SM90_ONE(true, N)  \
  }
