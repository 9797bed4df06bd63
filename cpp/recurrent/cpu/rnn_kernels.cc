// CPU recurrences: the steps in order; each step's recurrent product h W_hh
// for every example at once, in float32, in a fixed order (deterministic).
#include "recurrent/cpu/rnn_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace jaxdnn::recurrent {
namespace {

float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// q[b] = h[b] W + bias for every example: W [H, G*H] row-major. Columns
// in chunks, so a chunk of each W row is read once for all examples while
// the examples' chunks of q stay in cache; each q[b][j] sums k in order.
void Recurrent(const float* h, const float* w, const float* bias, int64_t batch, int64_t hidden, int64_t gh,
               float* q) {
  constexpr int64_t kChunk = 256;
  for (int64_t b = 0; b < batch; ++b) std::copy(bias, bias + gh, q + b * gh);
  for (int64_t j0 = 0; j0 < gh; j0 += kChunk) {
    const int64_t j1 = std::min(gh, j0 + kChunk);
    for (int64_t k = 0; k < hidden; ++k) {
      const float* row = w + k * gh;
      for (int64_t b = 0; b < batch; ++b) {
        const float hk = h[b * hidden + k];
        float* qb = q + b * gh;
        for (int64_t j = j0; j < j1; ++j) qb[j] += hk * row[j];
      }
    }
  }
}

// sum_j a[j] b[j] in eight interleaved partial sums added in a fixed order:
// vectorizable without reassociating, the same result on every run.
float Dot(const float* a, const float* b, int64_t n) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int l = 0; l < 8; ++l) part[l] += a[j + l] * b[j + l];
  }
  for (; j < n; ++j) part[j % 8] += a[j] * b[j];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
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
          const float g = std::tanh(gx[2 * H + k] + q[2 * H + k]), o = Sigmoid(gx[3 * H + k] + q[3 * H + k]);
          float& cb = c[b * H + k];
          cb = f * cb + i * g;
          out[k] = o * std::tanh(cb);
          saved[k] = i;
          saved[H + k] = f;
          saved[2 * H + k] = g;
          saved[3 * H + k] = o;
          p.c_seq[(t * B + b) * H + k] = cb;
        } else if (p.mode == RnnMode::kGru) {
          const float r = Sigmoid(gx[k] + q[k]), z = Sigmoid(gx[H + k] + q[H + k]);
          const float hn = q[2 * H + k], n = std::tanh(gx[2 * H + k] + r * hn);
          out[k] = (1.0f - z) * n + z * hb[k];
          saved[k] = r;
          saved[H + k] = z;
          saved[2 * H + k] = n;
          saved[3 * H + k] = hn;
        } else {
          const float a = gx[k] + q[k];
          out[k] = p.mode == RnnMode::kTanh ? std::tanh(a) : std::max(a, 0.0f);
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
  std::vector<float> dq(GH), dh_direct(H);
  for (int64_t t = T - 1; t >= 0; --t) {
    for (int64_t b = 0; b < B; ++b) {
      float* dgx = p.dgx + (t * B + b) * GH;
      if (t >= p.lengths[b]) {  // the state passed through: so do its gradients
        std::fill(dgx, dgx + GH, 0.0f);
        continue;
      }
      const float* h_prev = t == 0 ? p.h0 + b * H : p.out + ((t - 1) * B + b) * H;
      const float* dout = p.dout + (t * B + b) * H;
      const float* saved = S ? p.saved + (t * B + b) * S : nullptr;
      float* dhb = dh.data() + b * H;
      std::fill(dh_direct.begin(), dh_direct.end(), 0.0f);
      for (int64_t k = 0; k < H; ++k) {
        const float d = dhb[k] + dout[k];
        if (lstm) {
          const float i = saved[k], f = saved[H + k], g = saved[2 * H + k], o = saved[3 * H + k];
          const float c_t = p.c_seq[(t * B + b) * H + k];
          const float c_prev = t == 0 ? p.c0[b * H + k] : p.c_seq[((t - 1) * B + b) * H + k];
          const float tc = std::tanh(c_t);
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
      for (int64_t k = 0; k < H; ++k) {
        dhb[k] = dh_direct[k] + Dot(dq.data(), p.w_hh + k * GH, GH);
      }
    }
  }
  std::copy(dh.begin(), dh.end(), p.dh0);
  if (lstm) std::copy(dc.begin(), dc.end(), p.dc0);
}

}  // namespace jaxdnn::recurrent
