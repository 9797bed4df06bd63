// The persistent forward recurrence (rnn_plan.h): each CTA owns a slice of
// the hidden units; every step it stages the previous state's rows, takes
// its columns of h W_hh, applies the gates to its units and writes their new
// state for every CTA to read after the step barrier.
#include "recurrent/sm80/rnn_device.cuh"
#include "recurrent/sm80/rnn_host.cuh"
#include "recurrent/sm80/rnn_launch.h"
#include "recurrent/sm80/rnn_mma.cuh"

namespace jaxdnn::recurrent {
namespace {

struct FwdParams {
  RnnShape s;
  const float* gx;
  const float* b_hh;
  const float* h0;
  const float* c0;
  const int32_t* lengths;
  float* out;
  float* h_n;
  float* c_n;
  float* saved;
  float* c_seq;
  float* hbuf;  // 2 x [B][H]: step t reads slot t & 1 (t > 0), writes slot (t + 1) & 1
  void* hhalf;  // mma: the same slots in the weights' dtype (what other CTAs stage)
  unsigned int* counter;
};

// One example's step for unit u (valid: t < its length). q: the unit's
// recurrent sums per gate (bias included); gx: its input projections per
// gate (gx[g * gx_stride]); h_prev, c_prev: its previous state.
template <RnnMode M, typename WT>
__device__ __forceinline__ void StepUnit(const FwdParams& p, int t, int b, int u, const float* q,
                                         const float* gx, int gx_stride, float h_prev, float c_prev,
                                         bool valid) {
  const RnnShape& s = p.s;
  const int64_t H = s.hidden, row = int64_t(t) * s.batch + b;
  float* hnext = p.hbuf + int64_t((t + 1) & 1) * s.batch * H;
  const bool last = t == s.steps - 1;
  float h = h_prev;
  if constexpr (M == RnnMode::kLstm) {
    float c = c_prev;
    float* saved = p.saved + row * 4 * H;
    if (valid) {
      const float i = Sigmoid(gx[0] + q[0]), f = Sigmoid(gx[gx_stride] + q[1]);
      const float g = Tanh(gx[2 * gx_stride] + q[2]), o = Sigmoid(gx[3 * gx_stride] + q[3]);
      c = f * c_prev + i * g;
      h = o * Tanh(c);
      saved[u] = i;
      saved[H + u] = f;
      saved[2 * H + u] = g;
      saved[3 * H + u] = o;
    } else {
      for (int j = 0; j < 4; ++j) saved[j * H + u] = 0.0f;
    }
    p.c_seq[row * H + u] = c;
    if (last) p.c_n[int64_t(b) * H + u] = c;
  } else if constexpr (M == RnnMode::kGru) {
    float* saved = p.saved + row * 4 * H;
    if (valid) {
      const float r = Sigmoid(gx[0] + q[0]), z = Sigmoid(gx[gx_stride] + q[1]);
      const float n = Tanh(gx[2 * gx_stride] + r * q[2]);
      h = (1.0f - z) * n + z * h_prev;
      saved[u] = r;
      saved[H + u] = z;
      saved[2 * H + u] = n;
      saved[3 * H + u] = q[2];
    } else {
      for (int j = 0; j < 4; ++j) saved[j * H + u] = 0.0f;
    }
  } else {
    if (valid) {
      const float a = gx[0] + q[0];
      h = M == RnnMode::kTanh ? Tanh(a) : fmaxf(a, 0.0f);
    }
  }
  p.out[row * H + u] = valid ? h : 0.0f;
  hnext[int64_t(b) * H + u] = h;
  if constexpr (sizeof(WT) == 2) {
    if (s.mma)
      reinterpret_cast<WT*>(p.hhalf)[int64_t((t + 1) & 1) * s.batch * H + int64_t(b) * H + u] =
          FromFloat<WT>(h);
  }
  if (last) p.h_n[int64_t(b) * H + u] = h;
}

// The tile's operands of the CTA's own units, loaded alongside the staged
// rows (one memory latency for both; gx by cp.async, which TileProduct waits for): gx [rows][cols] (column g
// * units + j of unit0 + j), the previous h and c [rows][units].
template <RnnMode M>
__device__ __forceinline__ void StageOwn(const FwdParams& p, int t, int b0, int rows, const float* prev,
                                         float* gxs, float* hs, float* cs) {
  const RnnShape& s = p.s;
  const int H = s.hidden, U = s.units, unit0 = UnitBlock(s) * U;
  constexpr int kG = M == RnnMode::kLstm ? 4 : M == RnnMode::kGru ? 3 : 1;
  const int64_t GH = int64_t(kG) * H;
  // gxs[b][g * U + j]: rows of (b, g) pairs, U columns (a division by kG
  // only), copied in the background (TileProduct waits for them): gx is
  // written before the kernel, so the L1 path is safe.
  ForRowsCols(rows * kG, U, [&](int i, int bg, int j) {
    const int b = bg / kG, g = bg % kG, u = unit0 + j;
    const int64_t at = (int64_t(t) * s.batch + b0 + b) * GH + int64_t(g) * H + (u < H ? u : 0);
    CpAsync4(gxs + i, p.gx + at, u < H ? 4 : 0);
  });
  ForRowsCols(rows, U, [&](int i, int b, int j) {
    const int u = unit0 + j;
    if (u >= H) return;
    const int64_t bu = int64_t(b0 + b) * H + u;
    hs[i] = __ldcg(prev + bu);
    if constexpr (M == RnnMode::kLstm) cs[i] = t == 0 ? p.c0[bu] : p.c_seq[int64_t(t - 1) * s.batch * H + bu];
  });
}

// Step t + 1's input projections of the CTA's units into L2 while the grid
// meets at the barrier (they are read from DRAM otherwise, in the step's
// critical path).
__device__ __forceinline__ void PrefetchGx(const FwdParams& p, int t) {
  const RnnShape& s = p.s;
  const int H = s.hidden, unit0 = UnitBlock(s) * s.units, row0 = RowBegin(s);
  const int64_t GH = int64_t(s.gates) * H;
  ForRowsCols(RowEnd(s) - row0, int(s.gates), [&](int, int b, int g) {
    const float* at = p.gx + (int64_t(t) * s.batch + row0 + b) * GH + int64_t(g) * H + unit0;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(at));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(at + min(s.units, H - unit0) - 1));
  });
}

template <RnnMode M, typename WT>
__global__ void __launch_bounds__(kRnnThreads, 1) RnnFwdKernel(FwdParams p, const WT* __restrict__ slices) {
  extern __shared__ float4 smem4[];
  char* smem = reinterpret_cast<char*>(smem4);
  const RnnShape& s = p.s;
  const WT* w = LoadSlice(slices, s, smem);
  float* red = reinterpret_cast<float*>(smem + s.smem_red);
  float* bias = reinterpret_cast<float*>(smem + s.smem_bias);
  float* gxs = reinterpret_cast<float*>(smem + s.smem_extra);
  float* hs = gxs + s.batch_tile * s.cols;
  float* cs = hs + s.batch_tile * s.units;
  const int H = s.hidden, U = s.units, unit0 = UnitBlock(s) * U;
  const int row_end = RowEnd(s);
  for (int col = threadIdx.x; col < s.cols; col += blockDim.x) {
    const int g = col / U, u = unit0 + col % U;
    bias[col] = u < H ? p.b_hh[int64_t(g) * H + u] : 0.0f;
  }
  if constexpr (sizeof(WT) == 2) {
    if (s.mma) ZeroTile(s, reinterpret_cast<WT*>(smem + s.smem_a));
  }
  __syncthreads();
  constexpr int kG = M == RnnMode::kLstm ? 4 : M == RnnMode::kGru ? 3 : 1;
  for (int t = 0; t < s.steps; ++t) {
    const float* prev = t == 0 ? p.h0 : p.hbuf + int64_t(t & 1) * s.batch * H;
    for (int b0 = RowBegin(s); b0 < row_end; b0 += s.batch_tile) {
      const int rows = min(s.batch_tile, row_end - b0);
      StageOwn<M>(p, t, b0, rows, prev, gxs, hs, cs);
      const WT* prev16 =
          t == 0 ? nullptr : reinterpret_cast<const WT*>(p.hhalf) + int64_t(t & 1) * s.batch * H;
      TileProduct(w, prev, prev16, b0, rows, s, smem, red);
      ForRowsCols(rows, U, [&](int i, int b, int j) {
        const int u = unit0 + j;
        if (u >= H) return;
        float q[kG];
#pragma unroll
        for (int g = 0; g < kG; ++g) q[g] = SumParts(red, b, g * U + j, s) + bias[g * U + j];
        const int bg = b0 + b;
        StepUnit<M, WT>(p, t, bg, u, q, gxs + b * s.cols + j, U, hs[i], cs[i], t < p.lengths[bg]);
      });
      __syncthreads();  // the tile, partials and own operands are rewritten next
    }
    if (t + 1 < s.steps) {
      PrefetchGx(p, t + 1);
      GridBarrier(p.counter, unsigned(t + 1) * gridDim.x);
    }
  }
}

// No steps: the final state is the initial one.
LaunchStatus CopyInitialState(const RnnFwdArgs& a, cudaStream_t stream) {
  const int64_t bh = a.d.batch * a.d.hidden;
  cudaError_t err = CopyIfAny(a.h_n, a.h0, bh, stream);
  if (err == cudaSuccess && a.mode == RnnMode::kLstm) err = CopyIfAny(a.c_n, a.c0, bh, stream);
  return err;
}

// The kernel for mode M and weights WT (rnn_host.cuh picks one per call).
template <RnnMode M, typename WT>
struct FwdKernel {
  static constexpr auto fn = RnnFwdKernel<M, WT>;
};

// The kernel's parameters: the call's buffers and the workspace's parts.
FwdParams ParamsOf(const RnnFwdArgs& a, const RnnCudaPlan& plan, char* ws) {
  FwdParams p{ShapeOf(plan, a.d.steps),
              a.gx,
              a.b_hh,
              a.h0,
              a.c0,
              a.lengths,
              a.out,
              a.h_n,
              a.c_n,
              a.saved,
              a.c_seq,
              reinterpret_cast<float*>(ws + plan.ws_exchange),
              ws + plan.ws_half,
              reinterpret_cast<unsigned int*>(ws + plan.ws_counter)};
  return p;
}

}  // namespace

LaunchStatus RnnFwdCuda(const RnnFwdArgs& a, WeightDtype wd, const RnnDevice& dev, void* workspace,
                        int64_t workspace_bytes, cudaStream_t stream) {
  if (a.d.batch == 0 || a.d.hidden == 0) return cudaSuccess;
  if (a.d.steps == 0) return CopyInitialState(a, stream);
  const RnnCudaPlan plan = MakeRnnPlan(false, a.mode, a.d, wd, dev);
  if (!plan.ok) return LaunchStatus::Refused(plan.why);
  if (workspace_bytes < plan.ws_bytes)
    return LaunchStatus::Refused("the workspace is smaller than the plan's");
  char* ws = static_cast<char*>(workspace);
  return RunPersistent<FwdKernel>(a.mode, wd, a.w_hh, ParamsOf(a, plan, ws), plan, ws, stream);
}

}  // namespace jaxdnn::recurrent
