// Turns the FFI call frames of bias_act and glu into their argument structs,
// checking every shape and dtype so that a malformed call fails with a message.
#include <string>

#include "common/activation.h"
#include "activations/problem.h"
#include "common/call_frame.h"

namespace jaxdnn::activations {
namespace {

constexpr const char* kBaFwd = "jaxdnn bias_act forward";
constexpr const char* kBaBwd = "jaxdnn bias_act backward";
constexpr const char* kGluFwd = "jaxdnn glu forward";
constexpr const char* kGluBwd = "jaxdnn glu backward";

ffi::Error CheckFloat(const ffi::AnyBuffer& b, const char* op, const char* name) {
  const auto t = b.element_type();
  if (t == ffi::DataType::F32 || t == ffi::DataType::BF16 || t == ffi::DataType::F16) {
    return ffi::Error::Success();
  }
  return InvalidArg(op,
                    std::string(name) + " dtype " + DtypeName(t) + " is not float32, bfloat16 or float16");
}

ffi::Error CheckAct(int32_t act, const char* op) {
  if (act >= 0 && act < kNumActs) return ffi::Error::Success();
  return InvalidArg(op, "unknown activation code " + std::to_string(act));
}

// Rows x cols of a buffer whose last axis holds `cols` entries per row.
Shape RowsOf(const ffi::AnyBuffer& b, int64_t cols) {
  Shape s;
  s.cols = cols;
  s.rows = cols == 0 ? 0 : int64_t(b.element_count()) / cols;
  return s;
}

// `b` has `ref`'s element count and last dim times `last_ratio_num / den`,
// and (same_dtype) its dtype.
ffi::Error Like(const ffi::AnyBuffer& ref, const ffi::AnyBuffer& b, const char* op, const char* name,
                int64_t num = 1, int64_t den = 1) {
  if (b.dimensions().size() != ref.dimensions().size() || LastDim(b) * den != LastDim(ref) * num ||
      int64_t(b.element_count()) * den != int64_t(ref.element_count()) * num) {
    return InvalidArg(op, std::string(name) + " has the wrong shape");
  }
  if (b.element_type() != ref.element_type())
    return InvalidArg(op, std::string(name) + " has the wrong dtype");
  return ffi::Error::Success();
}

ffi::Error Bias(const ffi::AnyBuffer& b, int64_t cols, const char* op, const char* name) {
  if (b.element_type() != ffi::DataType::F32) {
    return InvalidArg(op, std::string(name) + " must be float32, got " + DtypeName(b.element_type()));
  }
  if (b.dimensions().size() != 1 || b.dimensions()[0] != cols) {
    return InvalidArg(op, std::string(name) + " must be 1-D with one entry per column");
  }
  return ffi::Error::Success();
}

ffi::Error Done(ffi::RemainingArgs args, ffi::RemainingRets rets, size_t a, size_t r, const char* op) {
  if (a != args.size() || r != rets.size()) return InvalidArg(op, "unexpected number of operands or results");
  return ffi::Error::Success();
}

}  // namespace

ffi::ErrorOr<BiasActFwdArgs> ReadBiasActFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                                                float param, bool has_bias) {
  size_t a = 0, r = 0;
  JAXDNN_CHECK(CheckAct(act, kBaFwd));
  JAXDNN_TRY(x, NextArg(args, a, kBaFwd, "x"));
  JAXDNN_CHECK(CheckFloat(x, kBaFwd, "x"));
  BiasActFwdArgs p;
  p.shape = RowsOf(x, LastDim(x));
  if (has_bias) {
    JAXDNN_TRY(bias, NextArg(args, a, kBaFwd, "bias"));
    JAXDNN_CHECK(Bias(bias, p.shape.cols, kBaFwd, "bias"));
    p.bias = static_cast<const float*>(bias.untyped_data());
  }
  JAXDNN_TRY(y, NextRet(rets, r, kBaFwd, "y"));
  JAXDNN_CHECK(Like(x, *y, kBaFwd, "y"));
  JAXDNN_CHECK(Done(args, rets, a, r, kBaFwd));
  p.dtype = x.element_type();
  p.act = act;
  p.param = param;
  p.x = x.untyped_data();
  p.y = y->untyped_data();
  return p;
}

ffi::ErrorOr<BiasActBwdArgs> ReadBiasActBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                                                float param, bool has_bias, bool with_workspace) {
  size_t a = 0, r = 0;
  JAXDNN_CHECK(CheckAct(act, kBaBwd));
  JAXDNN_TRY(dy, NextArg(args, a, kBaBwd, "dy"));
  JAXDNN_CHECK(CheckFloat(dy, kBaBwd, "dy"));
  JAXDNN_TRY(x, NextArg(args, a, kBaBwd, "x"));
  JAXDNN_CHECK(Like(dy, x, kBaBwd, "x"));
  BiasActBwdArgs p;
  p.shape = RowsOf(x, LastDim(x));
  if (has_bias) {
    JAXDNN_TRY(bias, NextArg(args, a, kBaBwd, "bias"));
    JAXDNN_CHECK(Bias(bias, p.shape.cols, kBaBwd, "bias"));
    p.bias = static_cast<const float*>(bias.untyped_data());
  }
  JAXDNN_TRY(dx, NextRet(rets, r, kBaBwd, "dx"));
  JAXDNN_CHECK(Like(x, *dx, kBaBwd, "dx"));
  if (has_bias) {
    JAXDNN_TRY(dbias, NextRet(rets, r, kBaBwd, "dbias"));
    JAXDNN_CHECK(Bias(*dbias, p.shape.cols, kBaBwd, "dbias"));
    p.dbias = static_cast<float*>(dbias->untyped_data());
    if (with_workspace) {
      JAXDNN_TRY(ws, NextRet(rets, r, kBaBwd, "workspace"));
      if (ws->element_type() != ffi::DataType::F32) {
        return ffi::Unexpected(InvalidArg(kBaBwd, "workspace must be float32"));
      }
      p.partials = static_cast<float*>(ws->untyped_data());
      p.workspace_elems = int64_t(ws->element_count());
    }
  }
  JAXDNN_CHECK(Done(args, rets, a, r, kBaBwd));
  p.dtype = x.element_type();
  p.act = act;
  p.param = param;
  p.dy = dy.untyped_data();
  p.x = x.untyped_data();
  p.dx = dx->untyped_data();
  return p;
}

ffi::ErrorOr<GluFwdArgs> ReadGluFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                                        float param, bool split) {
  size_t a = 0, r = 0;
  JAXDNN_CHECK(CheckAct(act, kGluFwd));
  JAXDNN_TRY(value, NextArg(args, a, kGluFwd, split ? "x" : "value"));
  JAXDNN_CHECK(CheckFloat(value, kGluFwd, split ? "x" : "value"));
  GluFwdArgs p;
  const int64_t in_last = LastDim(value);
  if (split) {
    if (in_last % 2 != 0) return ffi::Unexpected(InvalidArg(kGluFwd, "x's last dim must be even"));
    p.shape = RowsOf(value, in_last);
    p.shape.cols = in_last / 2;
    p.in_stride = in_last;
    p.gate = static_cast<const char*>(value.untyped_data()) + p.shape.cols * ByteWidth(value.element_type());
  } else {
    JAXDNN_TRY(gate, NextArg(args, a, kGluFwd, "gate"));
    JAXDNN_CHECK(Like(value, gate, kGluFwd, "gate"));
    p.shape = RowsOf(value, in_last);
    p.in_stride = in_last;
    p.gate = gate.untyped_data();
  }
  JAXDNN_TRY(out, NextRet(rets, r, kGluFwd, "out"));
  JAXDNN_CHECK(Like(value, *out, kGluFwd, "out", 1, split ? 2 : 1));
  JAXDNN_CHECK(Done(args, rets, a, r, kGluFwd));
  p.dtype = value.element_type();
  p.act = act;
  p.param = param;
  p.value = value.untyped_data();
  p.out = out->untyped_data();
  return p;
}

ffi::ErrorOr<GluBwdArgs> ReadGluBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t act,
                                        float param, bool split) {
  size_t a = 0, r = 0;
  JAXDNN_CHECK(CheckAct(act, kGluBwd));
  JAXDNN_TRY(dout, NextArg(args, a, kGluBwd, "dout"));
  JAXDNN_CHECK(CheckFloat(dout, kGluBwd, "dout"));
  JAXDNN_TRY(value, NextArg(args, a, kGluBwd, split ? "x" : "value"));
  JAXDNN_CHECK(Like(dout, value, kGluBwd, split ? "x" : "value", split ? 2 : 1, 1));
  GluBwdArgs p;
  p.shape = RowsOf(dout, LastDim(dout));
  p.in_stride = LastDim(value);
  const size_t half_bytes = size_t(p.shape.cols) * ByteWidth(value.element_type());
  if (split) {
    p.gate = static_cast<const char*>(value.untyped_data()) + half_bytes;
    JAXDNN_TRY(dx, NextRet(rets, r, kGluBwd, "dx"));
    JAXDNN_CHECK(Like(value, *dx, kGluBwd, "dx"));
    p.dvalue = dx->untyped_data();
    p.dgate = static_cast<char*>(dx->untyped_data()) + half_bytes;
  } else {
    JAXDNN_TRY(gate, NextArg(args, a, kGluBwd, "gate"));
    JAXDNN_CHECK(Like(value, gate, kGluBwd, "gate"));
    p.gate = gate.untyped_data();
    JAXDNN_TRY(dvalue, NextRet(rets, r, kGluBwd, "dvalue"));
    JAXDNN_CHECK(Like(value, *dvalue, kGluBwd, "dvalue"));
    JAXDNN_TRY(dgate, NextRet(rets, r, kGluBwd, "dgate"));
    JAXDNN_CHECK(Like(value, *dgate, kGluBwd, "dgate"));
    p.dvalue = dvalue->untyped_data();
    p.dgate = dgate->untyped_data();
  }
  JAXDNN_CHECK(Done(args, rets, a, r, kGluBwd));
  p.dtype = dout.element_type();
  p.act = act;
  p.param = param;
  p.dout = dout.untyped_data();
  p.value = value.untyped_data();
  return p;
}

}  // namespace jaxdnn::activations
