// CPU recurrences: the steps in order; each step's recurrent product h W_hh
// for every example at once, in float32, in a fixed order (deterministic).
#include "recurrent/cpu/rnn_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/cpu_clones.h"

namespace jaxdnn::recurrent {
namespace {

float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// q[b] = h[b] W + bias for every example: W [H, G*H] row-major. Each
// output vector of 8 columns sums k in order in a register, two examples at
// a time sharing each load of W (the same sums, in the same order, as one
// scalar loop per element).
typedef float Vec8 __attribute__((vector_size(32)));

inline __attribute__((always_inline)) Vec8 Load8(const float* p) {
  Vec8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Columns [j, j + 8 * V) of two examples' rows (h0, h1: the same pointer
// for a lone last example): 2 x V independent sums, so the FMAs' latency
// overlaps.
template <int V>
inline __attribute__((always_inline)) void RecurrentBlock(const float* h0, const float* h1, const float* w,
                                                          const float* bias, int64_t hidden, int64_t gh,
                                                          int64_t j, float* q0, float* q1) {
  Vec8 a0[V], a1[V];
  for (int v = 0; v < V; ++v) a0[v] = a1[v] = Load8(bias + j + 8 * v);
  for (int64_t k = 0; k < hidden; ++k) {
    const float x0 = h0[k], x1 = h1[k];
    const float* row = w + k * gh + j;
    for (int v = 0; v < V; ++v) {
      const Vec8 wv = Load8(row + 8 * v);
      a0[v] += x0 * wv;
      a1[v] += x1 * wv;
    }
  }
  for (int v = 0; v < V; ++v) {
    std::memcpy(q0 + j + 8 * v, &a0[v], sizeof(Vec8));
    if (q1 != nullptr) std::memcpy(q1 + j + 8 * v, &a1[v], sizeof(Vec8));
  }
}

JAXDNN_CPU_CLONES void Recurrent(const float* h, const float* w, const float* bias, int64_t batch,
                                 int64_t hidden, int64_t gh, float* q) {
  const int64_t wide_end = gh / 32 * 32, vec_end = gh / 8 * 8;
  for (int64_t b = 0; b < batch; b += 2) {
    const bool pair = b + 1 < batch;
    const float* h0 = h + b * hidden;
    const float* h1 = pair ? h0 + hidden : h0;
    float* q0 = q + b * gh;
    float* q1 = pair ? q0 + gh : nullptr;
    for (int64_t j = 0; j < wide_end; j += 32) RecurrentBlock<4>(h0, h1, w, bias, hidden, gh, j, q0, q1);
    for (int64_t j = wide_end; j < vec_end; j += 8) RecurrentBlock<1>(h0, h1, w, bias, hidden, gh, j, q0, q1);
    for (int64_t j = vec_end; j < gh; ++j) {
      for (int64_t r = b; r < std::min(batch, b + 2); ++r) {
        float acc = bias[j];
        for (int64_t k = 0; k < hidden; ++k) acc += h[r * hidden + k] * w[k * gh + j];
        q[r * gh + j] = acc;
      }
    }
  }
}

// tanh through one exp (libm's tanhf goes through expm1f, several times
// slower); absolute error ~1e-7.
float Tanh(float v) {
  const float e = std::exp(-2.0f * std::fabs(v));
  return std::copysign((1.0f - e) / (1.0f + e), v);
}

}  // namespace

void RnnFwdCpu(const RnnFwdArgs& p) {
  const int64_t T = p.d.steps, B = p.d.batch, H = p.d.hidden, GH = GatesOf(p.mode) * H;
  const int64_t S = SavedPerHidden(p.mode) * H;
  const bool lstm = p.mode == RnnMode::kLstm;
  std::vector<float> h(p.h0, p.h0 + B * H), c;
  if (lstm) c.assign(p.c0, p.c0 + B * H);
  std::vector<float> q_all(B * GH);
  for (int64_t t = 0; t < T; ++t) {
    Recurrent(h.data(), p.w_hh, p.b_hh, B, H, GH, q_all.data());
    for (int64_t b = 0; b < B; ++b) {
      float* out = p.out + (t * B + b) * H;
      float* saved = S ? p.saved + (t * B + b) * S : nullptr;
      float* hb = h.data() + b * H;
      if (t >= p.lengths[b]) {  // past the example's end: state kept, zeros out
        std::fill(out, out + H, 0.0f);
        if (S) std::fill(saved, saved + S, 0.0f);
        if (lstm) std::copy(c.data() + b * H, c.data() + (b + 1) * H, p.c_seq + (t * B + b) * H);
        continue;
      }
      const float* gx = p.gx + (t * B + b) * GH;
      const float* q = q_all.data() + b * GH;
      for (int64_t k = 0; k < H; ++k) {
        if (lstm) {
          const float i = Sigmoid(gx[k] + q[k]), f = Sigmoid(gx[H + k] + q[H + k]);
          const float g = Tanh(gx[2 * H + k] + q[2 * H + k]), o = Sigmoid(gx[3 * H + k] + q[3 * H + k]);
          float& cb = c[b * H + k];
          cb = f * cb + i * g;
          out[k] = o * Tanh(cb);
          saved[k] = i;
          saved[H + k] = f;
          saved[2 * H + k] = g;
          saved[3 * H + k] = o;
          p.c_seq[(t * B + b) * H + k] = cb;
        } else if (p.mode == RnnMode::kGru) {
          const float r = Sigmoid(gx[k] + q[k]), z = Sigmoid(gx[H + k] + q[H + k]);
          const float hn = q[2 * H + k], n = Tanh(gx[2 * H + k] + r * hn);
          out[k] = (1.0f - z) * n + z * hb[k];
          saved[k] = r;
          saved[H + k] = z;
          saved[2 * H + k] = n;
          saved[3 * H + k] = hn;
        } else {
          const float a = gx[k] + q[k];
          out[k] = p.mode == RnnMode::kTanh ? Tanh(a) : std::max(a, 0.0f);
        }
      }
      std::copy(out, out + H, hb);
    }
  }
  std::copy(h.begin(), h.end(), p.h_n);
  if (lstm) std::copy(c.begin(), c.end(), p.c_n);
}

void RnnBwdCpu(const RnnBwdArgs& p) {
  const int64_t T = p.d.steps, B = p.d.batch, H = p.d.hidden, GH = GatesOf(p.mode) * H;
  const int64_t S = SavedPerHidden(p.mode) * H;
  const bool lstm = p.mode == RnnMode::kLstm, gru = p.mode == RnnMode::kGru;
  std::vector<float> dh(p.dh_n, p.dh_n + B * H), dc;
  if (lstm) dc.assign(p.dc_n, p.dc_n + B * H);
  // dh_{t-1} = direct + dq W_hh^T for every example at once: the product
  // runs as Recurrent's over W_hh^T [G*H, H] (transposed once).
  std::vector<float> w_t(GH * H), zeros(H, 0.0f), dq_all(B * GH), direct(B * H), through(B * H);
  for (int64_t k = 0; k < H; ++k) {
    for (int64_t j = 0; j < GH; ++j) w_t[j * H + k] = p.w_hh[k * GH + j];
  }
  for (int64_t t = T - 1; t >= 0; --t) {
    for (int64_t b = 0; b < B; ++b) {
      float* dgx = p.dgx + (t * B + b) * GH;
      float* dq = dq_all.data() + b * GH;
      float* dh_direct = direct.data() + b * H;
      if (t >= p.lengths[b]) {  // the state passed through: so do its gradients
        std::fill(dgx, dgx + GH, 0.0f);
        std::fill(dq, dq + GH, 0.0f);
        continue;
      }
      const float* h_prev = t == 0 ? p.h0 + b * H : p.out + ((t - 1) * B + b) * H;
      const float* dout = p.dout + (t * B + b) * H;
      const float* saved = S ? p.saved + (t * B + b) * S : nullptr;
      float* dhb = dh.data() + b * H;
      std::fill(dh_direct, dh_direct + H, 0.0f);
      for (int64_t k = 0; k < H; ++k) {
        const float d = dhb[k] + dout[k];
        if (lstm) {
          const float i = saved[k], f = saved[H + k], g = saved[2 * H + k], o = saved[3 * H + k];
          const float c_t = p.c_seq[(t * B + b) * H + k];
          const float c_prev = t == 0 ? p.c0[b * H + k] : p.c_seq[((t - 1) * B + b) * H + k];
          const float tc = Tanh(c_t);
          const float dct = dc[b * H + k] + d * o * (1.0f - tc * tc);
          dq[k] = dct * g * i * (1.0f - i);
          dq[H + k] = dct * c_prev * f * (1.0f - f);
          dq[2 * H + k] = dct * i * (1.0f - g * g);
          dq[3 * H + k] = d * tc * o * (1.0f - o);
          dc[b * H + k] = dct * f;
          for (int j = 0; j < 4; ++j) dgx[j * H + k] = dq[j * H + k];
        } else if (gru) {
          const float r = saved[k], z = saved[H + k], n = saved[2 * H + k], hn = saved[3 * H + k];
          const float dan = d * (1.0f - z) * (1.0f - n * n);
          const float daz = d * (h_prev[k] - n) * z * (1.0f - z);
          const float dar = dan * hn * r * (1.0f - r);
          dgx[k] = dar;
          dgx[H + k] = daz;
          dgx[2 * H + k] = dan;
          dq[k] = dar;
          dq[H + k] = daz;
          dq[2 * H + k] = dan * r;
          dh_direct[k] = d * z;
        } else {
          const float h = p.out[(t * B + b) * H + k];
          const float da = p.mode == RnnMode::kTanh ? d * (1.0f - h * h) : (h > 0.0f ? d : 0.0f);
          dgx[k] = da;
          dq[k] = da;
        }
      }
    }
    Recurrent(dq_all.data(), w_t.data(), zeros.data(), B, GH, H, through.data());
    for (int64_t b = 0; b < B; ++b) {
      if (t >= p.lengths[b]) continue;
      for (int64_t k = 0; k < H; ++k) dh[b * H + k] = direct[b * H + k] + through[b * H + k];
    }
  }
  std::copy(dh.begin(), dh.end(), p.dh0);
  if (lstm) std::copy(dc.begin(), dc.end(), p.dc0);
}

}  // namespace jaxdnn::recurrent
