// The CUDA Winograd forward (winograd_fwd.h): the three transform kernels
// and the launch sequence around the batched GEMMs (winograd_gemm.cuh).
#include "conv/sm80/winograd_fwd.h"

#include <algorithm>
#include <type_traits>

#include "common/activation.h"
#include "common/cuda_vec.cuh"
#include "conv/sm80/depthwise_common.cuh"
#include "conv/sm80/winograd_gemm.cuh"
#include "conv/winograd_math.h"

namespace jaxdnn::conv {
namespace {

int64_t RoundUpTo(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
size_t Round256(int64_t bytes) { return size_t(RoundUpTo(bytes, 256)); }

// The kernels' view of the problem: sizes, padding, the plan's layout.
struct WgShape {
  int64_t groups, cin, cout, cin_g, cout_g;
  int64_t in_d, in_h, in_w, out_d, out_h, out_w, pad_d, pad_h, pad_w;
  int64_t tiles_h, tiles_w, tiles, tp, cp, kp;
};

WgShape ShapeOf(const ConvGeometry& g, const WinogradCudaPlan& q) {
  return WgShape{g.groups,  g.in_channels, g.out_channels, g.cin_g(), g.cout_g(),  g.in[0],     g.in[1],
                 g.in[2],   g.out[0],      g.out[1],       g.out[2],  g.pad_lo[0], g.pad_lo[1], g.pad_lo[2],
                 q.tiles_h, q.tiles_w,     q.tiles,        q.tp,      q.cp,        q.kp};
}

// Tile t's sample, output depth, tile row and tile column.
struct WgTile {
  int64_t n, od, th, tw;
};
__device__ __forceinline__ WgTile DecodeTile(const WgShape& s, int64_t t) {
  WgTile r;
  r.tw = t % s.tiles_w;
  t /= s.tiles_w;
  r.th = t % s.tiles_h;
  t /= s.tiles_h;
  r.od = t % s.out_d;
  r.n = t / s.out_d;
  return r;
}

__device__ __forceinline__ int64_t GridStride() { return int64_t(gridDim.x) * blockDim.x; }
__device__ __forceinline__ int64_t FirstIndex() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }

// U[point][group][ci][co] = (G g G^T)[point] for ci < C_in/g, co < C_out/g;
// zero in the padding.
template <int M, typename T>
__global__ void __launch_bounds__(256) WinogradFilterKernel(WgShape s, const T* w, T* u) {
  constexpr int kT = WinogradMatrices<M>::kT;
  const int64_t total = s.groups * s.cp * s.kp;
  for (int64_t i = FirstIndex(); i < total; i += GridStride()) {
    const int64_t co = i % s.kp, ci = (i / s.kp) % s.cp, gr = i / (s.kp * s.cp);
    float k[3][3] = {};
    if (ci < s.cin_g && co < s.cout_g) {
#pragma unroll
      for (int a = 0; a < 3; ++a) {
#pragma unroll
        for (int b = 0; b < 3; ++b)
          k[a][b] = Vec16<T>::Load1(w + ((a * 3 + b) * s.cin_g + ci) * s.cout + gr * s.cout_g + co);
      }
    }
    float r[kT][kT];
    WinogradWeightTransform<M>(k, r);
#pragma unroll
    for (int a = 0; a < kT; ++a) {
#pragma unroll
      for (int b = 0; b < kT; ++b)
        Vec16<T>::Store1(u + (((a * kT + b) * s.groups + gr) * s.cp + ci) * s.kp + co, r[a][b]);
    }
  }
}

// V[point][group][t][c] = (B^T d B)[point] of tile t, kVec channels a
// thread (16-byte accesses where kVec > 1); zero for padded tiles and
// channels.
template <int M, typename T, int kVec>
__global__ void __launch_bounds__(256) WinogradInputKernel(WgShape s, const T* x, T* v) {
  constexpr int kT = WinogradMatrices<M>::kT;
  const int64_t vecs = s.cp / kVec, total = s.groups * s.tp * vecs;
  for (int64_t i = FirstIndex(); i < total; i += GridStride()) {
    const int64_t c0 = (i % vecs) * kVec, t = (i / vecs) % s.tp, gr = i / (vecs * s.tp);
    const WgTile tile = DecodeTile(s, t);
    const int64_t id = tile.od - s.pad_d;
    const bool live = t < s.tiles && c0 < s.cin_g && id >= 0 && id < s.in_d;
    float d[kT][kT][kVec];
#pragma unroll
    for (int r = 0; r < kT; ++r) {
      const int64_t ih = tile.th * M - s.pad_h + r;
#pragma unroll
      for (int c = 0; c < kT; ++c) {
        const int64_t iw = tile.tw * M - s.pad_w + c;
        const bool in = live && ih >= 0 && ih < s.in_h && iw >= 0 && iw < s.in_w;
        const T* src = x + (((tile.n * s.in_d + id) * s.in_h + ih) * s.in_w + iw) * s.cin + gr * s.cin_g + c0;
        if constexpr (kVec == 1) {
          d[r][c][0] = in ? Vec16<T>::Load1(src) : 0.0f;
        } else {
          if (in) {
            Vec16<T>::Unpack(__ldg(reinterpret_cast<const uint4*>(src)), d[r][c]);
          } else {
#pragma unroll
            for (int e = 0; e < kVec; ++e) d[r][c][e] = 0.0f;
          }
        }
      }
    }
    float out[kT][kT][kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      float de[kT][kT], ve[kT][kT];
#pragma unroll
      for (int r = 0; r < kT; ++r) {
#pragma unroll
        for (int c = 0; c < kT; ++c) de[r][c] = d[r][c][e];
      }
      WinogradInputTransform<M>(de, ve);
#pragma unroll
      for (int a = 0; a < kT; ++a) {
#pragma unroll
        for (int b = 0; b < kT; ++b) out[a][b][e] = ve[a][b];
      }
    }
#pragma unroll
    for (int a = 0; a < kT; ++a) {
#pragma unroll
      for (int b = 0; b < kT; ++b) {
        T* dst = v + (((a * kT + b) * s.groups + gr) * s.tp + t) * s.cp + c0;
        if constexpr (kVec == 1) {
          Vec16<T>::Store1(dst, out[a][b][0]);
        } else {
          *reinterpret_cast<uint4*>(dst) = Vec16<T>::Pack(out[a][b]);
        }
      }
    }
  }
}

struct WgEpilogue {
  const void* bias;
  const void* residual;
  void* y;
  void* z;
  int bias_dtype, act;
  float act_param, alpha, beta;
};

// Y = A^T M A of tile t for output channel co, then the epilogue on each
// of its outputs inside the image.
template <int M, typename OT>
__global__ void __launch_bounds__(256) WinogradOutputKernel(WgShape s, const float* m, WgEpilogue e) {
  constexpr int kT = WinogradMatrices<M>::kT;
  const int64_t total = s.tiles * s.cout;
  for (int64_t i = FirstIndex(); i < total; i += GridStride()) {
    const int64_t co = i % s.cout, t = i / s.cout, gr = co / s.cout_g, cl = co % s.cout_g;
    float mt[kT][kT];
#pragma unroll
    for (int a = 0; a < kT; ++a) {
#pragma unroll
      for (int b = 0; b < kT; ++b)
        mt[a][b] = __ldg(m + (((a * kT + b) * s.groups + gr) * s.tp + t) * s.kp + cl);
    }
    float y[M][M];
    WinogradOutputTransform<M>(mt, y);
    const WgTile tile = DecodeTile(s, t);
    const float bias = e.bias != nullptr ? BiasAt(e.bias, e.bias_dtype, co) : 0.0f;
#pragma unroll
    for (int a = 0; a < M; ++a) {
      const int64_t oh = tile.th * M + a;
#pragma unroll
      for (int b = 0; b < M; ++b) {
        const int64_t ow = tile.tw * M + b;
        if (oh >= s.out_h || ow >= s.out_w) continue;
        const int64_t out = (((tile.n * s.out_d + tile.od) * s.out_h + oh) * s.out_w + ow) * s.cout + co;
        float z = e.alpha * y[a][b] + bias;
        if (e.residual != nullptr) z += e.beta * Vec16<OT>::Load1(static_cast<const OT*>(e.residual) + out);
        if (e.z != nullptr) Vec16<OT>::Store1(static_cast<OT*>(e.z) + out, z);
        Vec16<OT>::Store1(static_cast<OT*>(e.y) + out, ApplyCode(e.act, z, e.act_param));
      }
    }
  }
}

// Blocks for a grid-stride loop over `total` items.
unsigned BlocksFor(int64_t total) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((total + 255) / 256, 1 << 20)));
}

template <int M, typename T, typename OT>
LaunchStatus Run(const ConvFwdArgs& p, const WinogradCudaPlan& q, cudaStream_t stream) {
  const WgShape s = ShapeOf(p.g, q);
  char* ws = static_cast<char*>(p.workspace);
  T* u = reinterpret_cast<T*>(ws);
  T* v = reinterpret_cast<T*>(ws + q.u_bytes);
  float* m = reinterpret_cast<float*>(ws + q.u_bytes + q.v_bytes);
  const int64_t batches = int64_t(q.points) * s.groups;

  WinogradFilterKernel<M, T>
      <<<BlocksFor(s.groups * s.cp * s.kp), 256, 0, stream>>>(s, static_cast<const T*>(p.w), u);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;

  const T* x = static_cast<const T*>(p.x);
  constexpr int kVec = std::is_same_v<T, float> ? 1 : 8;
  const bool vec = kVec > 1 && s.cin_g % kVec == 0 && s.cin % kVec == 0 && Aligned16(p.x);
  if (vec) {
    WinogradInputKernel<M, T, kVec><<<BlocksFor(s.groups * s.tp * s.cp / kVec), 256, 0, stream>>>(s, x, v);
  } else {
    WinogradInputKernel<M, T, 1><<<BlocksFor(s.groups * s.tp * s.cp), 256, 0, stream>>>(s, x, v);
  }
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;

  const WinogradGemmArgs gemm{v, u, m, s.tp, s.kp, s.cp};
  if constexpr (std::is_same_v<T, float>) {
    const dim3 grid(unsigned(s.tp / kWgF32Tile), unsigned(s.kp / kWgF32Tile), unsigned(batches));
    WinogradGemmF32Kernel<<<grid, 256, 0, stream>>>(gemm);
  } else {
    const dim3 grid(unsigned(s.tp / kWgBm), unsigned(s.kp / kWgBn), unsigned(batches));
    WinogradGemmKernel<T><<<grid, 256, 0, stream>>>(gemm);
  }
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;

  WgEpilogue e{};
  e.bias = p.e.has_bias ? p.bias : nullptr;
  e.residual = p.e.has_residual ? p.residual : nullptr;
  e.y = p.y;
  e.z = p.e.saved == kSavePreact ? p.z : nullptr;
  e.bias_dtype = static_cast<int>(p.bias_dtype);
  e.act = p.e.act;
  e.act_param = p.e.act_param;
  e.alpha = p.e.alpha;
  e.beta = p.e.beta;
  WinogradOutputKernel<M, OT><<<BlocksFor(s.tiles * s.cout), 256, 0, stream>>>(s, m, e);
  return cudaGetLastError();
}

}  // namespace

WinogradCudaPlan PlanWinogradCuda(const ConvGeometry& g, ffi::DataType dtype) {
  WinogradCudaPlan q;
  q.tile = dtype == ffi::DataType::F32 && g.out[1] >= 4 && g.out[2] >= 4 ? 4 : 2;
  q.points = (q.tile + 2) * (q.tile + 2);
  q.tiles_h = (g.out[1] + q.tile - 1) / q.tile;
  q.tiles_w = (g.out[2] + q.tile - 1) / q.tile;
  q.tiles = g.batch * g.out[0] * q.tiles_h * q.tiles_w;
  q.tp = RoundUpTo(std::max<int64_t>(q.tiles, 1), kWgBm);
  q.cp = RoundUpTo(std::max<int64_t>(g.cin_g(), 1), kWgBk);
  q.kp = RoundUpTo(std::max<int64_t>(g.cout_g(), 1), kWgBn);
  const int64_t elem = dtype == ffi::DataType::F32 ? 4 : 2, batches = int64_t(q.points) * g.groups;
  q.u_bytes = Round256(batches * q.cp * q.kp * elem);
  q.v_bytes = Round256(batches * q.tp * q.cp * elem);
  q.m_bytes = Round256(batches * q.tp * q.kp * 4);
  return q;
}

const char* WinogradFwdRefusal(const ConvFwdArgs& p) {
  if (!WinogradServes(p.g)) return "winograd: it serves 3x3 windows, stride 1, no input or kernel dilation";
  if (!DwIsFloat(p.dtype)) return "winograd: x and w must be float32, bfloat16 or float16";
  if (p.out_dtype != p.dtype && p.out_dtype != ffi::DataType::F32)
    return "winograd: the output dtype must be x's or float32";
  if (p.e.has_bias && !DwIsFloat(p.bias_dtype)) return "winograd: the bias must be a float dtype";
  if (p.e.has_residual && p.residual_dtype != p.out_dtype)
    return "winograd: the residual must have the output's dtype";
  if (p.e.act < 0 || p.e.act >= kNumActs) return "winograd: unknown activation";
  if (p.g.groups < 1 || p.g.groups * 36 > 65535) return "winograd: more than 1820 groups";
  return nullptr;
}

int WinogradCudaTile(const ConvFwdArgs& p) { return PlanWinogradCuda(p.g, p.dtype).tile; }

size_t WinogradFwdWorkspace(const ConvFwdArgs& p) { return PlanWinogradCuda(p.g, p.dtype).workspace(); }

LaunchStatus WinogradFwdCuda(const ConvFwdArgs& p, cudaStream_t stream) {
  if (const char* why = WinogradFwdRefusal(p)) return LaunchStatus::Refused(why);
  if (p.e.saved == kSavePreact && p.z == nullptr)
    return LaunchStatus::Refused("winograd: the pre-activation output z is missing");
  const WinogradCudaPlan q = PlanWinogradCuda(p.g, p.dtype);
  if (q.tiles == 0 || p.g.out_channels == 0) return cudaSuccess;
  if (p.workspace == nullptr || p.workspace_bytes < q.workspace())
    return LaunchStatus::Refused("winograd: the workspace is smaller than the plan's");
  const bool wide = p.out_dtype == ffi::DataType::F32;
  switch (p.dtype) {
    case ffi::DataType::F32:
      return q.tile == 4 ? Run<4, float, float>(p, q, stream) : Run<2, float, float>(p, q, stream);
    case ffi::DataType::BF16:
      return wide ? Run<2, __nv_bfloat16, float>(p, q, stream)
                  : Run<2, __nv_bfloat16, __nv_bfloat16>(p, q, stream);
    default: return wide ? Run<2, __half, float>(p, q, stream) : Run<2, __half, __half>(p, q, stream);
  }
}

}  // namespace jaxdnn::conv
