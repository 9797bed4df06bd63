// The group norm on CUDA (formulas in cnn_norms/problem.h), on the shared
// channels-last row walker: blocks over (channel vectors, chunks of
// positions, samples). A group's channels are a few adjacent ones of every
// row (20 bytes at 320 channels in 32 groups), so blocks read whole channel
// rows and keep per-channel sums; a small kernel per (sample, group) then
// adds the channels' partials in a fixed order.
//   forward:  per-channel sums of x - k (k = the sample's first position: a
//             shift inside the data) -> mean, rstd per group -> y;
//   backward: per-channel sums of dz and dz xhat -> dscale, dbias per sample
//             and the group's sums of dxhat, dxhat xhat -> dx.
// Workspace (both directions): float32 [N, chunks, 2, C] partials, then (the
// backward) [N, G, 2] group sums; chunks from common/rows_plan.h.
#include "cnn_norms/sm80/group_norm_launch.h"
#include "common/sm80/row_walk.cuh"

namespace jaxdnn::cnn_norms {
namespace {

struct GnView {
  int64_t positions, cols, cg;
};

__device__ inline GnView ViewOf(const GroupShape& s) { return {s.positions, s.channels, s.per_group()}; }

// Sums over this block's chunk of positions of sample blockIdx.z:
// acc[0] += f0, acc[1] += f1 per channel, then the ordered block sums.
template <typename T, Act A, bool kVec, bool kBackward>
__global__ void __launch_bounds__(256)
    GnSumsKernel(const T* __restrict__ x, const T* __restrict__ dy, const T* __restrict__ res,
                 const float* mean, const float* rstd, const float* scale, const float* bias, GroupShape s,
                 float param, float* partials, int64_t chunk_rows) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  __shared__ float lanes[256 * N];
  const GnView v = ViewOf(s);
  const int64_t n = blockIdx.z, chunks = gridDim.y;
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  const bool live = col < v.cols;
  const int64_t base = n * v.positions * v.cols;
  float k[N], m[N], r[N], sc[N], b[N], acc[2][N] = {};
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const int64_t c = live ? col + e : 0, g = c / v.cg;
    if constexpr (kBackward) {
      m[e] = mean[n * s.groups + g];
      r[e] = rstd[n * s.groups + g];
      sc[e] = scale[n * v.cols + c];
      b[e] = bias[n * v.cols + c];
    } else {
      k[e] = Vec16<T>::Load1(x + base + c);  // the sample's first position
    }
  }
  const int64_t first = int64_t(blockIdx.y) * chunk_rows + threadIdx.y;
  const int64_t last = min(v.positions, (int64_t(blockIdx.y) + 1) * chunk_rows);
  if (live) {
    using Raw = Loads<typename P::Raw, 3>;
    WalkRows<Raw>(
        first, last, int64_t(blockDim.y),
        [&](int64_t pos) {
          const int64_t i = base + pos * v.cols + col;
          if constexpr (kBackward) {
            return Raw{{P::Load(x + i), P::Load(dy + i), res ? P::Load(res + i) : typename P::Raw{}}};
          } else {
            return Raw{{P::Load(x + i), typename P::Raw{}, typename P::Raw{}}};
          }
        },
        [&](int64_t, const Raw& raw) {
          float xv[N];
          P::Unpack(raw.op[0], xv);
          if constexpr (kBackward) {
            float g[N], rv[N];
            P::Unpack(raw.op[1], g);
            if (res) P::Unpack(raw.op[2], rv);
#pragma unroll
            for (int e = 0; e < N; ++e) {
              const float xhat = (xv[e] - m[e]) * r[e];
              // z exactly as the forward's apply computes it (a kink's side
              // must agree with the forward's output).
              float z = fmaf(xv[e] - m[e], r[e] * sc[e], b[e]);
              if (res) z += rv[e];
              const float dz = Backprop<A>(z, g[e], param);
              acc[0][e] += dz;
              acc[1][e] = fmaf(dz, xhat, acc[1][e]);
            }
          } else {
#pragma unroll
            for (int e = 0; e < N; ++e) {
              const float d = xv[e] - k[e];
              acc[0][e] += d;
              acc[1][e] = fmaf(d, d, acc[1][e]);
            }
          }
        });
  }
  BlockColumnSums<2, N>(acc, lanes, live, partials + ((n * chunks + blockIdx.y) * 2) * v.cols + col, v.cols);
}

// The block's sum of v, the same in every thread: warps by butterfly, then
// the warps' sums in warp order (a fixed order for a fixed launch).
__device__ inline float BlockSum(float v, float* warp_sums) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // warp_sums may still be read by a previous call
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < int(blockDim.x / 32); ++w) t += warp_sums[w];
  return t;
}

constexpr int kGroupThreads = 128;

// Forward, one block a (sample, group), its threads over the group's
// (chunk, channel) partials: the group's mean and rstd from the channels'
// shifted sums (s1, s2 about k_c over P positions per channel):
//   mean = (sum s1 + P sum_c k_c) / M,
//   M2 = sum over partials of s2 + 2 (k_c - mean) s1, plus P sum_c (k_c - mean)^2.
template <typename T>
__global__ void __launch_bounds__(kGroupThreads)
    GnStatsKernel(GroupNormFwdArgs p, const float* partials, int64_t chunks) {
  __shared__ float warp_sums[kGroupThreads / 32];
  const GroupShape& s = p.shape;
  const int64_t item = blockIdx.x, n = item / s.groups, g = item % s.groups, cg = s.per_group();
  const T* x = static_cast<const T*>(p.x) + n * s.positions * s.channels;
  const float* part = partials + n * chunks * 2 * s.channels;
  const float positions = float(s.positions);
  const int64_t entries = chunks * cg;
  float t = 0.f;
  for (int64_t j = threadIdx.x; j < entries; j += blockDim.x) {
    t += part[(j / cg) * 2 * s.channels + g * cg + j % cg];
  }
  for (int64_t c = threadIdx.x; c < cg; c += blockDim.x)
    t += positions * float(Vec16<T>::Load1(x + g * cg + c));
  const float count = float(s.positions * cg);
  const float mean = BlockSum(t, warp_sums) / count;
  float m2 = 0.f;
  for (int64_t j = threadIdx.x; j < entries; j += blockDim.x) {
    const int64_t c = g * cg + j % cg;
    const float* at = part + (j / cg) * 2 * s.channels + c;
    m2 += at[s.channels] + 2.f * (float(Vec16<T>::Load1(x + c)) - mean) * at[0];
  }
  for (int64_t c = threadIdx.x; c < cg; c += blockDim.x) {
    const float d = float(Vec16<T>::Load1(x + g * cg + c)) - mean;
    m2 += positions * d * d;
  }
  m2 = BlockSum(m2, warp_sums);
  if (threadIdx.x == 0) {
    p.mean[item] = mean;
    p.rstd[item] = rsqrtf(fmaxf(m2 / count, 0.f) + p.attrs.epsilon);
  }
}

// Forward with no positions: the CPU's statistics of an empty group.
__global__ void __launch_bounds__(256) GnEmptyStatsKernel(GroupNormFwdArgs p) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= p.shape.samples * p.shape.groups) return;
  p.mean[item] = 0.f;
  p.rstd[item] = rsqrtf(p.attrs.epsilon);
}

// Backward, one block a (sample, group): dscale, dbias of its channels (a
// warp a channel, lanes over the chunks) and the group's sums of dxhat and
// dxhat xhat (into ab [N, G, 2]).
__global__ void __launch_bounds__(kGroupThreads)
    GnParamGradKernel(GroupNormBwdArgs p, const float* partials, int64_t chunks, float* ab) {
  __shared__ float warp_sums[kGroupThreads / 32];
  const GroupShape& s = p.shape;
  const int64_t item = blockIdx.x, n = item / s.groups, g = item % s.groups, cg = s.per_group();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const float* part = partials + n * chunks * 2 * s.channels;
  float a = 0.f, b = 0.f;
  for (int64_t c = g * cg + warp; c < (g + 1) * cg; c += warps) {
    float sdz = 0.f, sdzx = 0.f;
    for (int64_t k = lane; k < chunks; k += 32) {
      sdz += part[k * 2 * s.channels + c];
      sdzx += part[(k * 2 + 1) * s.channels + c];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      sdz += __shfl_xor_sync(0xffffffffu, sdz, o);
      sdzx += __shfl_xor_sync(0xffffffffu, sdzx, o);
    }
    if (lane == 0) {  // lane 0's sums: one order for every run
      p.dbias[n * s.channels + c] = sdz;
      p.dscale[n * s.channels + c] = sdzx;
      a = fmaf(p.scale[n * s.channels + c], sdz, a);
      b = fmaf(p.scale[n * s.channels + c], sdzx, b);
    }
  }
  a = BlockSum(lane == 0 ? a : 0.f, warp_sums);
  b = BlockSum(lane == 0 ? b : 0.f, warp_sums);
  if (threadIdx.x == 0) {
    ab[2 * item] = a;
    ab[2 * item + 1] = b;
  }
}

// Elementwise: y (forward), or dx and dresidual (backward).
template <typename T, Act A, bool kVec, bool kBackward>
__global__ void __launch_bounds__(256)
    GnApplyKernel(const T* __restrict__ x, const T* __restrict__ dy, const T* __restrict__ res,
                  const float* mean, const float* rstd, const float* scale, const float* bias,
                  const float* ab, GroupShape s, float param, T* __restrict__ out, T* __restrict__ dres) {
  using P = Pack<T, kVec>;
  constexpr int N = P::N;
  const GnView v = ViewOf(s);
  const int64_t n = blockIdx.z;
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  // The block's channels' coefficients, worked out once, a thread a channel,
  // in shared memory (gain = rstd scale, so z = (x - mean) gain + bias; the
  // backward's t_a / M and t_b / M); the forward's three then
  // copied into registers, the backward's six read from shared memory in the
  // row loop (in registers they would cost the occupancy; see batch_norm.cu).
  __shared__ float sm[6][256];
  {
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int64_t c = int64_t(blockIdx.x) * blockDim.x * N + tid;
    if (tid < int(blockDim.x) * N && c < v.cols) {
      const int64_t g = n * s.groups + c / v.cg;
      const float inv_count = 1.f / float(v.positions * v.cg);
      sm[0][tid] = mean[g];
      sm[1][tid] = rstd[g];
      sm[2][tid] = scale[n * v.cols + c];
      sm[3][tid] = bias[n * v.cols + c];
      sm[4][tid] = kBackward ? ab[2 * g] * inv_count : rstd[g] * scale[n * v.cols + c];
      sm[5][tid] = kBackward ? ab[2 * g + 1] * inv_count : 0.f;
    }
    __syncthreads();
  }
  if (col >= v.cols) return;
  const int64_t base = n * v.positions * v.cols;
  const int at = threadIdx.x * N;
  const float* m = sm[0] + at;
  const float* r = sm[1] + at;
  const float* sc = sm[2] + at;
  const float* b = sm[3] + at;
  const float* ma = sm[4] + at;
  const float* mb = sm[5] + at;
  float fm[N], fgain[N], fb[N];  // the forward's coefficients in registers
  if constexpr (!kBackward) {
#pragma unroll
    for (int e = 0; e < N; ++e) {
      fm[e] = m[e];
      fgain[e] = ma[e];
      fb[e] = b[e];
    }
  }
  using Raw = Loads<typename P::Raw, 3>;
  WalkRows<Raw>(
      int64_t(blockIdx.y) * blockDim.y + threadIdx.y, v.positions, int64_t(gridDim.y) * blockDim.y,
      [&](int64_t pos) {
        const int64_t i = base + pos * v.cols + col;
        return Raw{{P::Load(x + i), kBackward ? P::Load(dy + i) : typename P::Raw{},
                    res ? P::Load(res + i) : typename P::Raw{}}};
      },
      [&](int64_t pos, const Raw& raw) {
        const int64_t i = base + pos * v.cols + col;
        float xv[N], g[N], rv[N], o[N];
        P::Unpack(raw.op[0], xv);
        if (kBackward) P::Unpack(raw.op[1], g);
        if (res) P::Unpack(raw.op[2], rv);
#pragma unroll
        for (int e = 0; e < N; ++e) {
          if constexpr (kBackward) {
            const float xhat = (xv[e] - m[e]) * r[e];
            float z = fmaf(xv[e] - m[e], r[e] * sc[e], b[e]);  // the forward's z, bit for bit
            if (res) z += rv[e];
            const float dz = Backprop<A>(z, g[e], param);
            g[e] = dz;
            o[e] = r[e] * (dz * sc[e] - ma[e] - xhat * mb[e]);
          } else {
            float z = fmaf(xv[e] - fm[e], fgain[e], fb[e]);
            if (res) z += rv[e];
            o[e] = Apply<A>(z, param);
          }
        }
        if (kBackward && dres) P::Store(dres + i, g);
        P::Store(out + i, o);
      });
}

dim3 Grid3(const GridPlan& g, int64_t samples) {
  return dim3(unsigned(g.col_blocks), unsigned(g.row_blocks), unsigned(samples));
}

}  // namespace

namespace {

// Both directions' launch plan: the column sums' grid and chunks, the
// elementwise grid, and the workspace they imply.
struct GnPlan {
  GridPlan sums, elem;
  int64_t chunk_rows;
  GnWorkspace ws;
};

GnPlan PlanOf(const GroupShape& s, int64_t itemsize) {
  GnPlan p;
  p.sums = MakeColumnSumPlan(s.positions, s.channels, itemsize, s.samples);
  p.elem = TightColumns(MakeGridPlan(s.positions, s.channels, s.channels, itemsize, s.samples));
  p.chunk_rows = CeilDiv(s.positions, p.sums.row_blocks);
  p.ws = {p.sums.row_blocks, s.samples * p.sums.row_blocks * 2 * s.channels, s.samples * s.groups * 2};
  return p;
}

}  // namespace

GnWorkspace GroupNormWorkspace(const GroupShape& s, int64_t itemsize) { return PlanOf(s, itemsize).ws; }

LaunchStatus GroupNormFwdCuda(const GroupNormFwdArgs& p, float* workspace, int64_t workspace_elems,
                              cudaStream_t stream) {
  const GroupShape& s = p.shape;
  if (s.samples == 0 || s.channels == 0) return cudaSuccess;
  if (s.samples > kGridYLimit) return LaunchStatus::Refused("more than 65535 samples in one call");
  const GnPlan plan = PlanOf(s, ffi::ByteWidth(p.dtype));
  const GridPlan &sums = plan.sums, &elem = plan.elem;
  const int64_t chunk_rows = plan.chunk_rows;
  if (workspace_elems < plan.ws.partials)
    return LaunchStatus::Refused("the workspace is smaller than the plan's");
  if (s.positions == 0) {
    GnEmptyStatsKernel<<<unsigned(CeilDiv(s.samples * s.groups, 256)), 256, 0, stream>>>(p);
    return Checked();
  }
  return ByDtypeAct(p.dtype, p.attrs.act, [&](auto t, auto a) -> LaunchStatus {
    using T = decltype(t);
    constexpr Act A = decltype(a)::value;
    const T* x = static_cast<const T*>(p.x);
    const T* res = static_cast<const T*>(p.residual);
    auto sk = sums.vec ? GnSumsKernel<T, Act::kIdentity, true, false>
                       : GnSumsKernel<T, Act::kIdentity, false, false>;
    sk<<<Grid3(sums, s.samples), Block(sums), 0, stream>>>(x, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                           nullptr, s, 0.f, workspace, chunk_rows);
    GnStatsKernel<T>
        <<<unsigned(s.samples * s.groups), kGroupThreads, 0, stream>>>(p, workspace, sums.row_blocks);
    auto ak = elem.vec ? GnApplyKernel<T, A, true, false> : GnApplyKernel<T, A, false, false>;
    ak<<<Grid3(elem, s.samples), Block(elem), 0, stream>>>(x, nullptr, res, p.mean, p.rstd, p.scale, p.bias,
                                                           nullptr, s, p.attrs.param, static_cast<T*>(p.y),
                                                           nullptr);
    return Checked();
  });
}

LaunchStatus GroupNormBwdCuda(const GroupNormBwdArgs& p, float* workspace, int64_t workspace_elems,
                              cudaStream_t stream) {
  const GroupShape& s = p.shape;
  if (s.samples == 0 || s.channels == 0) return cudaSuccess;
  if (s.samples > kGridYLimit) return LaunchStatus::Refused("more than 65535 samples in one call");
  const GnPlan plan = PlanOf(s, ffi::ByteWidth(p.dtype));
  const GridPlan &sums = plan.sums, &elem = plan.elem;
  const int64_t chunk_rows = plan.chunk_rows;
  if (workspace_elems < plan.ws.partials + plan.ws.group_sums) {
    return LaunchStatus::Refused("the workspace is smaller than the plan's");
  }
  if (s.positions == 0) {
    cudaError_t e = cudaMemsetAsync(p.dscale, 0, sizeof(float) * s.samples * s.channels, stream);
    return e != cudaSuccess ? e : cudaMemsetAsync(p.dbias, 0, sizeof(float) * s.samples * s.channels, stream);
  }
  float* ab = workspace + plan.ws.partials;
  return ByDtypeAct(p.dtype, p.attrs.act, [&](auto t, auto a) -> LaunchStatus {
    using T = decltype(t);
    constexpr Act A = decltype(a)::value;
    const T* x = static_cast<const T*>(p.x);
    const T* dy = static_cast<const T*>(p.dy);
    const T* res = static_cast<const T*>(p.residual);
    auto sk = sums.vec ? GnSumsKernel<T, A, true, true> : GnSumsKernel<T, A, false, true>;
    sk<<<Grid3(sums, s.samples), Block(sums), 0, stream>>>(x, dy, res, p.mean, p.rstd, p.scale, p.bias, s,
                                                           p.attrs.param, workspace, chunk_rows);
    GnParamGradKernel<<<unsigned(s.samples * s.groups), kGroupThreads, 0, stream>>>(p, workspace,
                                                                                    sums.row_blocks, ab);
    auto ak = elem.vec ? GnApplyKernel<T, A, true, true> : GnApplyKernel<T, A, false, true>;
    ak<<<Grid3(elem, s.samples), Block(elem), 0, stream>>>(x, dy, res, p.mean, p.rstd, p.scale, p.bias, ab, s,
                                                           p.attrs.param, static_cast<T*>(p.dx),
                                                           static_cast<T*>(p.dresidual));
    return Checked();
  });
}

}  // namespace jaxdnn::cnn_norms
