// The persistent forward recurrence (rnn_plan.h): each CTA owns a slice of
// the hidden units; every step it stages the previous state's rows, takes
// its columns of h W_hh, applies the gates to its units and writes their new
// state for every CTA to read after the step barrier.
#include "recurrent/sm80/rnn_device.cuh"
#include "recurrent/sm80/rnn_host.cuh"
#include "recurrent/sm80/rnn_launch.h"

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
  unsigned int* counter;
};

// One example's step for unit u (valid: t < its length). q: the unit's
// recurrent sums per gate (bias included); h_prev its previous state.
template <RnnMode M>
__device__ __forceinline__ void StepUnit(const FwdParams& p, int t, int b, int u, const float* q,
                                         float h_prev, bool valid) {
  const RnnShape& s = p.s;
  const int64_t H = s.hidden, row = int64_t(t) * s.batch + b;
  const int64_t G = s.gates;
  float* hnext = p.hbuf + int64_t((t + 1) & 1) * s.batch * H;
  const bool last = t == s.steps - 1;
  float h = h_prev;
  if constexpr (M == RnnMode::kLstm) {
    const float c_prev = t == 0 ? p.c0[int64_t(b) * H + u] : p.c_seq[(row - s.batch) * H + u];
    float c = c_prev;
    float* saved = p.saved + row * 4 * H;
    if (valid) {
      const float* gx = p.gx + row * G * H;
      const float i = Sigmoid(gx[u] + q[0]), f = Sigmoid(gx[H + u] + q[1]);
      const float g = Tanh(gx[2 * H + u] + q[2]), o = Sigmoid(gx[3 * H + u] + q[3]);
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
      const float* gx = p.gx + row * G * H;
      const float r = Sigmoid(gx[u] + q[0]), z = Sigmoid(gx[H + u] + q[1]);
      const float n = Tanh(gx[2 * H + u] + r * q[2]);
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
      const float a = p.gx[row * H + u] + q[0];
      h = M == RnnMode::kTanh ? Tanh(a) : fmaxf(a, 0.0f);
    }
  }
  p.out[row * H + u] = valid ? h : 0.0f;
  hnext[int64_t(b) * H + u] = h;
  if (last) p.h_n[int64_t(b) * H + u] = h;
}

template <RnnMode M, typename WT>
__global__ void __launch_bounds__(kRnnThreads, 1) RnnFwdKernel(FwdParams p, const WT* __restrict__ slices) {
  extern __shared__ float4 smem4[];
  char* smem = reinterpret_cast<char*>(smem4);
  const RnnShape& s = p.s;
  const WT* w = LoadSlice(slices, s, smem);
  float* a = reinterpret_cast<float*>(smem + s.smem_a);
  float* red = reinterpret_cast<float*>(smem + s.smem_red);
  float* bias = reinterpret_cast<float*>(smem + s.smem_bias);
  const int H = s.hidden, unit0 = blockIdx.x * s.units;
  for (int col = threadIdx.x; col < s.cols; col += blockDim.x) {
    const int g = col / s.units, u = unit0 + col % s.units;
    bias[col] = u < H ? p.b_hh[int64_t(g) * H + u] : 0.0f;
  }
  __syncthreads();
  constexpr int kG = M == RnnMode::kLstm ? 4 : M == RnnMode::kGru ? 3 : 1;
  for (int t = 0; t < s.steps; ++t) {
    const float* prev = t == 0 ? p.h0 : p.hbuf + int64_t(t & 1) * s.batch * H;
    for (int b0 = 0; b0 < s.batch; b0 += s.batch_tile) {
      const int rows = min(s.batch_tile, s.batch - b0);
      StageRows(prev, b0, rows, s, a);
      __syncthreads();
      SliceProductRows(w, a, rows, s, red);
      __syncthreads();
      const int kp = s.rounds * 32;
      for (int i = threadIdx.x; i < rows * s.units; i += blockDim.x) {
        const int b = i / s.units, j = i % s.units, u = unit0 + j;
        if (u >= H) continue;
        float q[kG];
#pragma unroll
        for (int g = 0; g < kG; ++g) q[g] = SumParts(red, b, g * s.units + j, s) + bias[g * s.units + j];
        const int bg = b0 + b;
        StepUnit<M>(p, t, bg, u, q, a[b * kp + u], t < p.lengths[bg]);
      }
      __syncthreads();  // the tile and partials are rewritten next
    }
    if (t + 1 < s.steps) GridBarrier(p.counter, unsigned(t + 1) * gridDim.x);
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
