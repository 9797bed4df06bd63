// The persistent backward recurrence (rnn_plan.h), steps in reverse: each
// CTA owns the same kind of slice of the hidden units as the forward; a step
// turns its units' state gradients into their gate gradients (dgx, and dq,
// the gradient of h W_hh + b_hh, exchanged), then after the step barrier
// takes its units' rows of dq W_hh^T: the state gradient of the step before.
// The weight gradients are not this kernel's (api.py: one GEMM).
#include "recurrent/sm80/rnn_device.cuh"
#include "recurrent/sm80/rnn_host.cuh"
#include "recurrent/sm80/rnn_launch.h"
#include "recurrent/sm80/rnn_mma.cuh"

namespace jaxdnn::recurrent {
namespace {

struct BwdParams {
  RnnShape s;
  const float* dout;
  const float* dh_n;
  const float* dc_n;
  const float* h0;
  const float* c0;
  const int32_t* lengths;
  const float* out;
  const float* saved;
  const float* c_seq;
  float* dgx;
  float* dh0;
  float* dc0;
  float* dq;      // 2 x [B][G*H]: step t writes slot t & 1
  float* dh;      // [B][H], each unit's row touched by its CTA only
  float* dc;      // [B][H] (LSTM)
  float* direct;  // [B][H]: the part of dh_{t-1} not through W_hh
  unsigned int* counter;
};

// Step t's gate gradients for example b, unit u: dgx and the exchanged dq
// (the same but for the GRU's candidate, whose recurrent part is scaled by
// r), the cell gradient carried on, the direct part of the state gradient.
// XT: the exchange's dtype (float32, or with the mma product the weights').
template <RnnMode M, typename XT>
__device__ __forceinline__ void GateGrads(const BwdParams& p, int t, int b, int u) {
  const RnnShape& s = p.s;
  const int64_t H = s.hidden, G = s.gates, row = int64_t(t) * s.batch + b, bu = int64_t(b) * H + u;
  float* dgx = p.dgx + row * G * H;
  XT* dq = reinterpret_cast<XT*>(p.dq) + int64_t(t & 1) * s.batch * G * H + int64_t(b) * G * H;
  if (t >= p.lengths[b]) {  // the state passed through this step: so does its gradient
    for (int g = 0; g < G; ++g) {
      dgx[g * H + u] = 0.0f;
      dq[g * H + u] = FromFloat<XT>(0.0f);
    }
    p.direct[bu] = p.dh[bu];
    return;
  }
  const float d = p.dh[bu] + p.dout[row * H + u];
  if constexpr (M == RnnMode::kLstm) {
    const float* sv = p.saved + row * 4 * H;
    const float i = sv[u], f = sv[H + u], g = sv[2 * H + u], o = sv[3 * H + u];
    const float c_t = p.c_seq[row * H + u];
    const float c_prev = t == 0 ? p.c0[bu] : p.c_seq[(row - s.batch) * H + u];
    const float tc = Tanh(c_t);
    const float dct = p.dc[bu] + d * o * (1.0f - tc * tc);
    const float di = dct * g * i * (1.0f - i), df = dct * c_prev * f * (1.0f - f);
    const float dg = dct * i * (1.0f - g * g), dout_gate = d * tc * o * (1.0f - o);
    dgx[u] = di;
    dq[u] = FromFloat<XT>(di);
    dgx[H + u] = df;
    dq[H + u] = FromFloat<XT>(df);
    dgx[2 * H + u] = dg;
    dq[2 * H + u] = FromFloat<XT>(dg);
    dgx[3 * H + u] = dout_gate;
    dq[3 * H + u] = FromFloat<XT>(dout_gate);
    p.dc[bu] = dct * f;
    p.direct[bu] = 0.0f;
  } else if constexpr (M == RnnMode::kGru) {
    const float* sv = p.saved + row * 4 * H;
    const float r = sv[u], z = sv[H + u], n = sv[2 * H + u], hn = sv[3 * H + u];
    const float h_prev = t == 0 ? p.h0[bu] : p.out[(row - s.batch) * H + u];
    const float dan = d * (1.0f - z) * (1.0f - n * n);
    const float daz = d * (h_prev - n) * z * (1.0f - z);
    const float dar = dan * hn * r * (1.0f - r);
    dgx[u] = dar;
    dq[u] = FromFloat<XT>(dar);
    dgx[H + u] = daz;
    dq[H + u] = FromFloat<XT>(daz);
    dgx[2 * H + u] = dan;
    dq[2 * H + u] = FromFloat<XT>(dan * r);
    p.direct[bu] = d * z;
  } else {
    const float h = p.out[row * H + u];
    const float da = M == RnnMode::kTanh ? d * (1.0f - h * h) : (h > 0.0f ? d : 0.0f);
    dgx[u] = da;
    dq[u] = FromFloat<XT>(da);
    p.direct[bu] = 0.0f;
  }
}

// Step t's rows of the CTA's units (dout, saved, c_seq or out, and the
// step before's) into L2 while the grid meets at the barrier: the gate
// gradients read them from DRAM otherwise, in the step's critical path.
template <RnnMode M>
__device__ __forceinline__ void PrefetchStep(const BwdParams& p, int t) {
  const RnnShape& s = p.s;
  const int64_t H = s.hidden, unit0 = int64_t(UnitBlock(s)) * s.units;
  const int row0 = RowBegin(s);
  constexpr int kLines = M == RnnMode::kLstm ? 7 : M == RnnMode::kGru ? 6 : 2;
  for (int i = threadIdx.x; i < (RowEnd(s) - row0) * kLines; i += blockDim.x) {
    const int b = row0 + i / kLines, l = i % kLines;  // kLines is a constant: no division
    const int64_t row = int64_t(t) * s.batch + b;
    const float* at;
    if (l == 0) {
      at = p.dout + row * H;
    } else if (M != RnnMode::kLstm && M != RnnMode::kGru) {
      at = p.out + row * H;
    } else if (l <= 4) {
      at = p.saved + row * 4 * H + (l - 1) * H;
    } else if (M == RnnMode::kLstm) {
      if (l == 6 && t == 0) continue;
      at = p.c_seq + (l == 5 ? row : row - s.batch) * H;
    } else {
      if (t == 0) continue;
      at = p.out + (row - s.batch) * H;
    }
    at += unit0;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(at));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(at + std::min<int64_t>(s.units, H - unit0) - 1));
  }
}

template <RnnMode M, typename WT>
__global__ void __launch_bounds__(kRnnThreads, 1) RnnBwdKernel(BwdParams p, const WT* __restrict__ slices) {
  extern __shared__ float4 smem4[];
  char* smem = reinterpret_cast<char*>(smem4);
  const RnnShape& s = p.s;
  const WT* w = LoadSlice(slices, s, smem);
  float* red = reinterpret_cast<float*>(smem + s.smem_red);
  const int H = s.hidden, unit0 = UnitBlock(s) * s.units;
  const int row0 = RowBegin(s), row_end = RowEnd(s);
  const int mine = (row_end - row0) * s.units;  // (example, unit) pairs of this CTA
  for (int i = threadIdx.x; i < mine; i += blockDim.x) {
    const int b = row0 + i / s.units, u = unit0 + i % s.units;
    if (u >= H) continue;
    const int64_t bu = int64_t(b) * H + u;
    p.dh[bu] = p.dh_n[bu];
    if constexpr (M == RnnMode::kLstm) p.dc[bu] = p.dc_n[bu];
  }
  if constexpr (sizeof(WT) == 2) {
    if (s.mma) ZeroTile(s, reinterpret_cast<WT*>(smem + s.smem_a));
  }
  __syncthreads();
  unsigned int arrivals = 0;
  for (int t = s.steps - 1; t >= 0; --t) {
    ForRowsCols(row_end - row0, int(s.units), [&](int, int i, int j) {
      const int b = row0 + i, u = unit0 + j;
      if (u >= H) return;
      if constexpr (sizeof(WT) == 2) {
        if (s.mma) {
          GateGrads<M, WT>(p, t, b, u);
          return;
        }
      }
      GateGrads<M, float>(p, t, b, u);
    });
    if (t > 0) PrefetchStep<M>(p, t - 1);
    GridBarrier(p.counter, ++arrivals * gridDim.x);
    // The exchange: float32, or in WT on the mma path (GateGrads' XT).
    const float* dq = p.dq + int64_t(t & 1) * s.batch * s.k;
    const WT* dq16 = reinterpret_cast<const WT*>(p.dq) + int64_t(t & 1) * s.batch * s.k;
    for (int b0 = row0; b0 < row_end; b0 += s.batch_tile) {
      const int rows = min(s.batch_tile, row_end - b0);
      TileProduct(w, dq, s.mma ? dq16 : nullptr, b0, rows, s, smem, red);
      ForRowsCols(rows, int(s.units), [&](int, int b, int j) {
        const int u = unit0 + j;
        if (u >= H) return;
        const int64_t bu = int64_t(b0 + b) * H + u;
        p.dh[bu] = p.direct[bu] + SumParts(red, b, j, s);
      });
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < mine; i += blockDim.x) {
    const int b = row0 + i / s.units, u = unit0 + i % s.units;
    if (u >= H) continue;
    const int64_t bu = int64_t(b) * H + u;
    p.dh0[bu] = p.dh[bu];
    if constexpr (M == RnnMode::kLstm) p.dc0[bu] = p.dc[bu];
  }
}

// No steps: the initial state's gradient is the final state's.
LaunchStatus PassGradients(const RnnBwdArgs& a, cudaStream_t stream) {
  const int64_t bh = a.d.batch * a.d.hidden;
  cudaError_t err = CopyIfAny(a.dh0, a.dh_n, bh, stream);
  if (err == cudaSuccess && a.mode == RnnMode::kLstm) err = CopyIfAny(a.dc0, a.dc_n, bh, stream);
  return err;
}

// The kernel for mode M and weights WT (rnn_host.cuh picks one per call).
template <RnnMode M, typename WT>
struct BwdKernel {
  static constexpr auto fn = RnnBwdKernel<M, WT>;
};

// The kernel's parameters: the call's buffers and the workspace's parts.
BwdParams ParamsOf(const RnnBwdArgs& a, const RnnCudaPlan& plan, char* ws) {
  const int64_t bh = a.d.batch * a.d.hidden;
  float* state = reinterpret_cast<float*>(ws + plan.ws_state);
  BwdParams p{ShapeOf(plan, a.d.steps),
              a.dout,
              a.dh_n,
              a.dc_n,
              a.h0,
              a.c0,
              a.lengths,
              a.out,
              a.saved,
              a.c_seq,
              a.dgx,
              a.dh0,
              a.dc0,
              reinterpret_cast<float*>(ws + plan.ws_exchange),
              state,
              state + bh,
              state + 2 * bh,
              reinterpret_cast<unsigned int*>(ws + plan.ws_counter)};
  return p;
}

}  // namespace

LaunchStatus RnnBwdCuda(const RnnBwdArgs& a, WeightDtype wd, const RnnDevice& dev, void* workspace,
                        int64_t workspace_bytes, cudaStream_t stream) {
  if (a.d.batch == 0 || a.d.hidden == 0) return cudaSuccess;
  if (a.d.steps == 0) return PassGradients(a, stream);
  const RnnCudaPlan plan = MakeRnnPlan(true, a.mode, a.d, wd, dev);
  if (!plan.ok) return LaunchStatus::Refused(plan.why);
  if (workspace_bytes < plan.ws_bytes)
    return LaunchStatus::Refused("the workspace is smaller than the plan's");
  char* ws = static_cast<char*>(workspace);
  return RunPersistent<BwdKernel>(a.mode, wd, a.w_hh, ParamsOf(a, plan, ws), plan, ws, stream);
}

}  // namespace jaxdnn::recurrent
