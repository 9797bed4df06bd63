// Reads and checks the recurrences' call frames (call_frame.h).
#include "recurrent/call_frame.h"

#include <string>
#include <vector>

namespace jaxdnn::recurrent {
namespace {

ffi::Error Shape(const char* op, const char* name, ffi::Span<const int64_t> got, std::vector<int64_t> want) {
  bool ok = got.size() == want.size();
  for (size_t i = 0; ok && i < want.size(); ++i) ok = got[i] == want[i];
  if (ok) return ffi::Error::Success();
  std::string w = "[", g = "[";
  for (auto v : want) w += std::to_string(v) + ",";
  for (auto v : got) g += std::to_string(v) + ",";
  return InvalidArg(op, std::string(name) + " has shape " + g + "] where " + w + "] was expected");
}

ffi::ErrorOr<RnnDims> DimsOf(const char* op, int32_t mode, ffi::Span<const int64_t> gx_or_dgx) {
  if (mode < 0 || mode > 3) return ffi::Unexpected(InvalidArg(op, "unknown mode " + std::to_string(mode)));
  if (gx_or_dgx.size() != 3 || gx_or_dgx[2] % GatesOf(RnnMode(mode)) != 0) {
    return ffi::Unexpected(InvalidArg(op, "the projected inputs must be [steps, batch, gates * hidden]"));
  }
  return RnnDims{gx_or_dgx[0], gx_or_dgx[1], gx_or_dgx[2] / GatesOf(RnnMode(mode))};
}

#define RNN_CHECK(expr)                                      \
  do {                                                       \
    ffi::Error e_ = (expr);                                  \
    if (e_.failure()) return ffi::Unexpected(std::move(e_)); \
  } while (0)

}  // namespace

ffi::ErrorOr<RnnFwdArgs> ReadFwdCall(const char* op, int32_t mode, F32 gx, F32 w_hh, F32 b_hh, F32 h0, F32 c0,
                                     S32 lengths, OutF32 out, OutF32 h_n, OutF32 c_n, OutF32 saved,
                                     OutF32 c_seq) {
  auto d_or = DimsOf(op, mode, gx.dimensions());
  if (!d_or.has_value()) return ffi::Unexpected(d_or.error());
  const RnnDims d = *d_or;
  const RnnMode m = RnnMode(mode);
  const bool lstm = m == RnnMode::kLstm;
  const int64_t T = d.steps, B = d.batch, H = d.hidden, GH = GatesOf(m) * H, S = SavedPerHidden(m) * H;
  const std::vector<int64_t> bh = lstm ? std::vector<int64_t>{B, H} : std::vector<int64_t>{0};
  RNN_CHECK(Shape(op, "w_hh", w_hh.dimensions(), {H, GH}));
  RNN_CHECK(Shape(op, "b_hh", b_hh.dimensions(), {GH}));
  RNN_CHECK(Shape(op, "h0", h0.dimensions(), {B, H}));
  RNN_CHECK(Shape(op, "c0", c0.dimensions(), bh));
  RNN_CHECK(Shape(op, "lengths", lengths.dimensions(), {B}));
  RNN_CHECK(Shape(op, "out", out->dimensions(), {T, B, H}));
  RNN_CHECK(Shape(op, "h_n", h_n->dimensions(), {B, H}));
  RNN_CHECK(Shape(op, "c_n", c_n->dimensions(), bh));
  RNN_CHECK(Shape(op, "saved", saved->dimensions(), {T, B, S}));
  RNN_CHECK(Shape(op, "c_seq", c_seq->dimensions(),
                  lstm ? std::vector<int64_t>{T, B, H} : std::vector<int64_t>{0}));
  return RnnFwdArgs{m,
                    d,
                    gx.typed_data(),
                    w_hh.typed_data(),
                    b_hh.typed_data(),
                    h0.typed_data(),
                    c0.typed_data(),
                    lengths.typed_data(),
                    out->typed_data(),
                    h_n->typed_data(),
                    c_n->typed_data(),
                    saved->typed_data(),
                    c_seq->typed_data()};
}

ffi::ErrorOr<RnnBwdArgs> ReadBwdCall(const char* op, int32_t mode, F32 dout, F32 dh_n, F32 dc_n, F32 w_hh,
                                     F32 h0, F32 c0, S32 lengths, F32 out, F32 saved, F32 c_seq, OutF32 dgx,
                                     OutF32 dh0, OutF32 dc0) {
  auto d_or = DimsOf(op, mode, dgx->dimensions());
  if (!d_or.has_value()) return ffi::Unexpected(d_or.error());
  const RnnDims d = *d_or;
  const RnnMode m = RnnMode(mode);
  const bool lstm = m == RnnMode::kLstm;
  const int64_t T = d.steps, B = d.batch, H = d.hidden, GH = GatesOf(m) * H, S = SavedPerHidden(m) * H;
  const std::vector<int64_t> bh = lstm ? std::vector<int64_t>{B, H} : std::vector<int64_t>{0};
  RNN_CHECK(Shape(op, "dout", dout.dimensions(), {T, B, H}));
  RNN_CHECK(Shape(op, "dh_n", dh_n.dimensions(), {B, H}));
  RNN_CHECK(Shape(op, "dc_n", dc_n.dimensions(), bh));
  RNN_CHECK(Shape(op, "w_hh", w_hh.dimensions(), {H, GH}));
  RNN_CHECK(Shape(op, "h0", h0.dimensions(), {B, H}));
  RNN_CHECK(Shape(op, "c0", c0.dimensions(), bh));
  RNN_CHECK(Shape(op, "lengths", lengths.dimensions(), {B}));
  RNN_CHECK(Shape(op, "out", out.dimensions(), {T, B, H}));
  RNN_CHECK(Shape(op, "saved", saved.dimensions(), {T, B, S}));
  RNN_CHECK(
      Shape(op, "c_seq", c_seq.dimensions(), lstm ? std::vector<int64_t>{T, B, H} : std::vector<int64_t>{0}));
  RNN_CHECK(Shape(op, "dh0", dh0->dimensions(), {B, H}));
  RNN_CHECK(Shape(op, "dc0", dc0->dimensions(), bh));
  return RnnBwdArgs{m,
                    d,
                    dout.typed_data(),
                    dh_n.typed_data(),
                    dc_n.typed_data(),
                    w_hh.typed_data(),
                    h0.typed_data(),
                    c0.typed_data(),
                    lengths.typed_data(),
                    out.typed_data(),
                    saved.typed_data(),
                    c_seq.typed_data(),
                    dgx->typed_data(),
                    dh0->typed_data(),
                    dc0->typed_data()};
}

}  // namespace jaxdnn::recurrent
