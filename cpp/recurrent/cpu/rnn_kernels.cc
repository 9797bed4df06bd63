// CPU recurrences: the steps in order, examples one after another; each
// step's recurrent product h W_hh in float32, in a fixed order (deterministic).
#include "recurrent/cpu/rnn_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace jaxdnn::recurrent {
namespace {

float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// q = h W + b for one example: W [H, G*H] row-major.
void Recurrent(const float* h, const float* w, const float* b, int64_t hidden, int64_t gh, float* q) {
  std::copy(b, b + gh, q);
  for (int64_t k = 0; k < hidden; ++k) {
    const float hk = h[k];
    const float* row = w + k * gh;
    for (int64_t j = 0; j < gh; ++j) q[j] += hk * row[j];
  }
}

}  // namespace

void RnnFwdCpu(const RnnFwdArgs& p) {
  const int64_t T = p.d.steps, B = p.d.batch, H = p.d.hidden, GH = GatesOf(p.mode) * H;
  const int64_t S = SavedPerHidden(p.mode) * H;
  const bool lstm = p.mode == RnnMode::kLstm;
  std::vector<float> h(p.h0, p.h0 + B * H), c;
  if (lstm) c.assign(p.c0, p.c0 + B * H);
  std::vector<float> q(GH);
  for (int64_t t = 0; t < T; ++t) {
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
      Recurrent(hb, p.w_hh, p.b_hh, H, GH, q.data());
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
        const float* wrow = p.w_hh + k * GH;
        float acc = dh_direct[k];
        for (int64_t j = 0; j < GH; ++j) acc += dq[j] * wrow[j];
        dhb[k] = acc;
      }
    }
  }
  std::copy(dh.begin(), dh.end(), p.dh0);
  if (lstm) std::copy(dc.begin(), dc.end(), p.dc0);
}

}  // namespace jaxdnn::recurrent
