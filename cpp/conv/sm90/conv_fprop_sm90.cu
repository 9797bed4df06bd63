// CUTLASS 3 implicit-GEMM forward convolution on sm_90a (conv_fprop_sm90.h).
// GEMM view: M = N * outD * outH * outW (output positions, x read through the
// TMA's im2col mode), N = C_out, K = (C_in, S, R, T) walked as ceil(C_in/64)
// channel blocks per tap. One configuration: the 128x128x64 tile, cluster
// 1x1x1, CUTLASS's non-persistent warp-specialized schedule (the only sm90
// conv schedule; the one its generator instantiates), stages filling the
// shared memory the TMA epilogue leaves.
#include "conv/sm90/conv_fprop_sm90.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>

#include "common/activation.h"

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

namespace jaxdnn::conv {
namespace {

// The kernel for 16-bit element T (cutlass::bfloat16_t or cutlass::half_t).
template <class T>
struct FpropSm90 {
  static constexpr int kAlign = 8;  // elements in 16 bytes: TMA's stride and address unit
  using Layout = cutlass::layout::TensorNDHWC;
  // K tile as a rank-1 shape: it tiles only the channel mode of (C, S, R, T).
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::Shape<cute::_64>>;
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

constexpr size_t kWsAlign = 256;
size_t RoundUp(size_t n) { return (n + kWsAlign - 1) / kWsAlign * kWsAlign; }

// The problem in CUTLASS's terms, checked.
struct Plan {
  int act[5], flt[5];  // [N, D, H, W, C_in], [C_out, T, R, S, C_in]
  int lo[3], hi[3], stride[3], dil[3];
  float clamp_lo, clamp_hi;
  size_t weight_bytes = 0, bias_bytes = 0;
  bool empty = false;  // nothing to write
};

bool FitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

// nullptr when p is served (filling *pl), else the reason.
const char* MakePlan(const ConvFwdArgs& p, Plan* pl) {
  const ConvGeometry& g = p.g;
  if (p.dtype != ffi::DataType::BF16 && p.dtype != ffi::DataType::F16) {
    return "conv_fprop_sm90: x and w must be bfloat16 or float16";
  }
  if (p.out_dtype != p.dtype) return "conv_fprop_sm90: y must have x's dtype";
  if (g.groups != 1) return "conv_fprop_sm90: groups > 1 is not compiled";
  for (int k = 0; k < 3; ++k) {
    if (g.in_dilation[k] != 1) return "conv_fprop_sm90: input dilation (transposed conv) is not compiled";
    if (g.stride[k] < 1 || g.k_dilation[k] < 1 || g.window[k] < 1) {
      return "conv_fprop_sm90: strides, dilations and window must be positive";
    }
  }
  switch (static_cast<Act>(p.e.act)) {
    case Act::kIdentity:
      pl->clamp_lo = -std::numeric_limits<float>::infinity();
      pl->clamp_hi = -pl->clamp_lo;
      break;
    case Act::kRelu:
      pl->clamp_lo = 0.0f;
      pl->clamp_hi = std::numeric_limits<float>::infinity();
      break;
    case Act::kRelu6:
      pl->clamp_lo = 0.0f;
      pl->clamp_hi = 6.0f;
      break;
    default: return "conv_fprop_sm90: only the identity, relu and relu6 epilogues are compiled";
  }
  // Those three save nothing or y; a z would have no kernel writing it.
  if (p.e.saved == kSavePreact) return "conv_fprop_sm90: saving the pre-activation z is not compiled";
  if (p.e.has_residual && p.residual_dtype != p.out_dtype) {
    return "conv_fprop_sm90: the residual must have y's dtype";
  }
  if (p.e.has_bias && p.bias_dtype != ffi::DataType::F32 && p.bias_dtype != ffi::DataType::BF16 &&
      p.bias_dtype != ffi::DataType::F16 && p.bias_dtype != ffi::DataType::F64) {
    return "conv_fprop_sm90: unsupported bias dtype";
  }
  if ((p.e.has_bias && p.bias == nullptr) || (p.e.has_residual && p.residual == nullptr)) {
    return "conv_fprop_sm90: bias or residual flagged but null";
  }
  if (g.batch == 0 || g.out_positions() == 0 || g.out_channels == 0) {
    pl->empty = true;
    return nullptr;
  }
  if (g.in_channels <= 0 || g.in_channels % 8 != 0 || g.out_channels % 8 != 0) {
    return "conv_fprop_sm90: C_in and C_out must be positive multiples of 8 (16-byte TMA strides)";
  }
  if (!FitsInt(g.batch) || !FitsInt(g.in_channels) || !FitsInt(g.out_channels)) {
    return "conv_fprop_sm90: sizes exceed int32";
  }
  pl->act[0] = int(g.batch);
  pl->act[4] = pl->flt[4] = int(g.in_channels);
  pl->flt[0] = int(g.out_channels);
  for (int k = 0; k < 3; ++k) {
    const int64_t eff = (g.window[k] - 1) * g.k_dilation[k] + 1;
    // CUTLASS derives out = 1 + (in + lo + hi - eff) / stride. The smallest
    // hi giving ours can be negative (a 1x1 stride-2 VALID conv on an even
    // size never reads the last input); CUTLASS refuses that, but any hi with
    // the same quotient is the same conv, so take the smallest one >= 0.
    const int64_t hi = std::max<int64_t>(0, (g.out[k] - 1) * g.stride[k] + eff - g.in[k] - g.pad_lo[k]);
    const int64_t span = g.in[k] + g.pad_lo[k] + hi - eff;
    if (g.in[k] < 1) return "conv_fprop_sm90: an empty input dim with a nonempty output";
    if (g.pad_lo[k] < 0 || span < 0 || 1 + span / g.stride[k] != g.out[k]) {
      return "conv_fprop_sm90: negative padding is not compiled";
    }
    if (!FitsInt(g.in[k]) || !FitsInt(g.window[k]) || !FitsInt(g.pad_lo[k]) || !FitsInt(hi) ||
        !FitsInt(g.stride[k]) || !FitsInt(g.k_dilation[k])) {
      return "conv_fprop_sm90: sizes exceed int32";
    }
    pl->act[1 + k] = int(g.in[k]);
    pl->flt[1 + k] = int(g.window[k]);
    pl->lo[k] = int(g.pad_lo[k]);
    pl->hi[k] = int(hi);
    pl->stride[k] = int(g.stride[k]);
    pl->dil[k] = int(g.k_dilation[k]);
  }
  if (g.taps() > 65535) return "conv_fprop_sm90: more than 65535 taps";
  pl->weight_bytes = RoundUp(size_t(g.weights()) * 2);
  pl->bias_bytes = p.e.has_bias ? RoundUp(size_t(g.out_channels) * sizeof(float)) : 0;
  return nullptr;
}

template <class T>
typename FpropSm90<T>::Kernel::Arguments MakeArguments(const Plan& pl, float alpha, float beta, const void* x,
                                                       const void* wt, const float* bias, const void* c,
                                                       void* d) {
  using Kernel = typename FpropSm90<T>::Kernel;
  typename FpropSm90<T>::Problem shape(
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

// w [taps, C_in, C_out] -> wt [C_out, taps, C_in] through a 32x32 tile per
// (C_out block, C_in block, tap), moved as raw 16-bit words; blocks of the
// first C_in block and tap also widen bias[co] to float32.
__global__ void PrepareWeightsKernel(const uint16_t* __restrict__ w, uint16_t* __restrict__ wt, int taps,
                                     int cin, int cout, const void* bias, ffi::DataType bias_dtype,
                                     float* bias_out) {
  __shared__ uint16_t tile[32][33];
  const int tap = blockIdx.z, co0 = blockIdx.x * 32, ci0 = blockIdx.y * 32;
  for (int r = threadIdx.y; r < 32; r += blockDim.y) {
    const int ci = ci0 + r, co = co0 + threadIdx.x;
    if (ci < cin && co < cout) tile[r][threadIdx.x] = w[(int64_t(tap) * cin + ci) * cout + co];
  }
  __syncthreads();
  for (int r = threadIdx.y; r < 32; r += blockDim.y) {
    const int co = co0 + r, ci = ci0 + threadIdx.x;
    if (co < cout && ci < cin) wt[(int64_t(co) * taps + tap) * cin + ci] = tile[threadIdx.x][r];
  }
  const int co = co0 + threadIdx.x;
  if (bias_out != nullptr && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.y == 0 && co < cout) {
    float b;
    switch (bias_dtype) {
      case ffi::DataType::BF16:
        b = __uint_as_float(uint32_t(static_cast<const uint16_t*>(bias)[co]) << 16);
        break;
      case ffi::DataType::F16:
        b = __half2float(__ushort_as_half(static_cast<const uint16_t*>(bias)[co]));
        break;
      case ffi::DataType::F64: b = float(static_cast<const double*>(bias)[co]); break;
      default: b = static_cast<const float*>(bias)[co];
    }
    bias_out[co] = b;
  }
}

template <class T>
size_t CutlassWorkspace(const Plan& pl) {
  const auto args = MakeArguments<T>(pl, 1.0f, 0.0f, nullptr, nullptr, nullptr, nullptr, nullptr);
  return RoundUp(FpropSm90<T>::Kernel::get_workspace_size(args));
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

template <class T>
LaunchStatus Run(const ConvFwdArgs& p, const Plan& pl, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream) {
  using Kernel = typename FpropSm90<T>::Kernel;
  const size_t cutlass_bytes = CutlassWorkspace<T>(pl);
  if (workspace_bytes < cutlass_bytes + pl.weight_bytes + pl.bias_bytes || workspace == nullptr) {
    return LaunchStatus::Refused("conv_fprop_sm90: workspace smaller than ConvFpropSm90Workspace");
  }
  const bool has_res = p.e.has_residual;
  if (!Aligned16(workspace) || !Aligned16(p.x) || !Aligned16(p.y) || (has_res && !Aligned16(p.residual))) {
    return LaunchStatus::Refused("conv_fprop_sm90: x, y, residual and workspace must be 16-byte aligned");
  }
  char* ws = static_cast<char*>(workspace);
  void* wt = ws + cutlass_bytes;
  float* bias = p.e.has_bias ? reinterpret_cast<float*>(ws + cutlass_bytes + pl.weight_bytes) : nullptr;

  // Without a residual, beta = 0 keeps C unread (CUTLASS skips its loads);
  // y stands in as C so that C's TMA descriptor is still a valid one.
  const auto args = MakeArguments<T>(pl, p.e.alpha, has_res ? p.e.beta : 0.0f, p.x, wt, bias,
                                     has_res ? p.residual : p.y, p.y);
  if (!Kernel::can_implement(args)) {
    return LaunchStatus::Refused(
        "conv_fprop_sm90: outside CUTLASS's 3-D im2col TMA limits (per dim: padding <= 16, "
        "(window - 1) * dilation <= min(30, 16 + high padding); output positions < 2^31)");
  }

  const int taps = int(p.g.taps()), cin = pl.act[4], cout = pl.flt[0];
  const dim3 prep_grid((cout + 31) / 32, (cin + 31) / 32, taps);
  PrepareWeightsKernel<<<prep_grid, dim3(32, 8), 0, stream>>>(static_cast<const uint16_t*>(p.w),
                                                              static_cast<uint16_t*>(wt), taps, cin, cout,
                                                              p.bias, p.bias_dtype, bias);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;

  void* cutlass_ws = cutlass_bytes > 0 ? workspace : nullptr;
  if (Kernel::initialize_workspace(args, cutlass_ws, stream) != cutlass::Status::kSuccess) {
    return LaunchStatus::Refused("conv_fprop_sm90: CUTLASS workspace initialization failed");
  }
  // TMA descriptors (encoded on the host) travel in the kernel parameters.
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, cutlass_ws);
  constexpr int kSmem = Kernel::SharedStorageSize;
  auto* kernel = &cutlass::device_kernel<Kernel>;
  if ((err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem)) !=
      cudaSuccess) {
    return err;
  }
  kernel<<<Kernel::get_grid_shape(params), Kernel::get_block_shape(), kSmem, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace

template <class T>
bool Implementable(const Plan& pl, const ConvFwdArgs& p) {
  const auto args = MakeArguments<T>(pl, p.e.alpha, p.e.has_residual ? p.e.beta : 0.0f, nullptr, nullptr,
                                     nullptr, nullptr, nullptr);
  return FpropSm90<T>::Kernel::can_implement(args);
}

const char* ConvFpropSm90Refusal(const ConvFwdArgs& p) {
  Plan pl;
  if (const char* why = MakePlan(p, &pl)) return why;
  if (pl.empty) return nullptr;
  const bool ok = p.dtype == ffi::DataType::BF16 ? Implementable<cutlass::bfloat16_t>(pl, p)
                                                 : Implementable<cutlass::half_t>(pl, p);
  return ok ? nullptr : "conv_fprop_sm90: outside CUTLASS's 3-D im2col TMA limits";
}

size_t ConvFpropSm90Workspace(const ConvFwdArgs& p) {
  Plan pl;
  if (MakePlan(p, &pl) != nullptr || pl.empty) return 0;
  const size_t cutlass_bytes = p.dtype == ffi::DataType::BF16 ? CutlassWorkspace<cutlass::bfloat16_t>(pl)
                                                              : CutlassWorkspace<cutlass::half_t>(pl);
  return cutlass_bytes + pl.weight_bytes + pl.bias_bytes;
}

LaunchStatus ConvFpropSm90(const ConvFwdArgs& p, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  Plan pl;
  if (const char* why = MakePlan(p, &pl)) return LaunchStatus::Refused(why);
  if (pl.empty) return cudaSuccess;
  if (p.dtype == ffi::DataType::BF16)
    return Run<cutlass::bfloat16_t>(p, pl, workspace, workspace_bytes, stream);
  return Run<cutlass::half_t>(p, pl, workspace, workspace_bytes, stream);
}

}  // namespace jaxdnn::conv
