// Turns the FFI call frames into SoftmaxFwdArgs / SoftmaxBwdArgs, checking
// every shape and dtype so that a malformed call fails with a message.
#include <string>

#include "common/call_frame.h"
#include "softmax/problem.h"

namespace jaxdnn::softmax {
namespace {

constexpr const char* kFwd = "jaxdnn softmax forward";
constexpr const char* kBwd = "jaxdnn softmax backward";

bool IsSupportedFloat(ffi::DataType t) {
  return t == ffi::DataType::F32 || t == ffi::DataType::BF16 || t == ffi::DataType::F16;
}

// Rows x cols of a buffer whose last axis is the softmax axis.
ffi::ErrorOr<SoftmaxShape> ShapeOf(const ffi::AnyBuffer& b, const char* op) {
  auto dims = b.dimensions();
  if (dims.size() < 1) return ffi::Unexpected(InvalidArg(op, "x must have at least one axis"));
  SoftmaxShape s;
  s.cols = dims.back();
  s.rows = s.cols == 0 ? 0 : int64_t(b.element_count()) / s.cols;
  return s;
}

ffi::Error SameAs(const ffi::AnyBuffer& ref, const ffi::AnyBuffer& b, const char* op, const char* name,
                  bool same_dtype) {
  if (b.element_count() != ref.element_count() || b.dimensions().size() != ref.dimensions().size() ||
      (b.dimensions().size() > 0 && b.dimensions().back() != ref.dimensions().back())) {
    return InvalidArg(op, std::string(name) + " must have x's shape");
  }
  if (same_dtype && b.element_type() != ref.element_type()) {
    return InvalidArg(op, std::string(name) + " must have x's dtype");
  }
  if (!same_dtype && b.element_type() != ffi::DataType::PRED) {
    return InvalidArg(op, std::string(name) + " must be bool, got " + DtypeName(b.element_type()));
  }
  return ffi::Error::Success();
}

ffi::Error CheckFloat(const ffi::AnyBuffer& b, const char* op, const char* name) {
  if (IsSupportedFloat(b.element_type())) return ffi::Error::Success();
  return InvalidArg(op, std::string(name) + " dtype " + DtypeName(b.element_type()) +
                            " is not float32, bfloat16 or float16");
}

}  // namespace

ffi::ErrorOr<SoftmaxFwdArgs> ReadFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, bool log,
                                         bool masked) {
  size_t a = 0, r = 0;
  JAXDNN_TRY(x, NextArg(args, a, kFwd, "x"));
  JAXDNN_CHECK(CheckFloat(x, kFwd, "x"));
  SoftmaxFwdArgs p;
  if (masked) {
    JAXDNN_TRY(where, NextArg(args, a, kFwd, "where"));
    JAXDNN_CHECK(SameAs(x, where, kFwd, "where", false));
    p.where = static_cast<const bool*>(where.untyped_data());
  }
  JAXDNN_TRY(y, NextRet(rets, r, kFwd, "y"));
  JAXDNN_CHECK(SameAs(x, *y, kFwd, "y", true));
  if (a != args.size() || r != rets.size()) {
    return ffi::Unexpected(InvalidArg(kFwd, "unexpected number of operands or results"));
  }
  JAXDNN_TRY(shape, ShapeOf(x, kFwd));
  p.shape = shape;
  p.dtype = x.element_type();
  p.log = log;
  p.x = x.untyped_data();
  p.y = y->untyped_data();
  return p;
}

ffi::ErrorOr<SoftmaxBwdArgs> ReadBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, bool log,
                                         bool masked) {
  size_t a = 0, r = 0;
  JAXDNN_TRY(y, NextArg(args, a, kBwd, "y"));
  JAXDNN_CHECK(CheckFloat(y, kBwd, "y"));
  JAXDNN_TRY(dy, NextArg(args, a, kBwd, "dy"));
  JAXDNN_CHECK(SameAs(y, dy, kBwd, "dy", true));
  SoftmaxBwdArgs p;
  if (masked) {
    JAXDNN_TRY(where, NextArg(args, a, kBwd, "where"));
    JAXDNN_CHECK(SameAs(y, where, kBwd, "where", false));
    p.where = static_cast<const bool*>(where.untyped_data());
  }
  JAXDNN_TRY(dx, NextRet(rets, r, kBwd, "dx"));
  JAXDNN_CHECK(SameAs(y, *dx, kBwd, "dx", true));
  if (a != args.size() || r != rets.size()) {
    return ffi::Unexpected(InvalidArg(kBwd, "unexpected number of operands or results"));
  }
  JAXDNN_TRY(shape, ShapeOf(y, kBwd));
  p.shape = shape;
  p.dtype = y.element_type();
  p.log = log;
  p.y = y.untyped_data();
  p.dy = dy.untyped_data();
  p.dx = dx->untyped_data();
  return p;
}

namespace {

constexpr const char* kCeFwd = "jaxdnn cross-entropy forward";
constexpr const char* kCeBwd = "jaxdnn cross-entropy backward";

// A per-row buffer of `dtype` with one element per row of `logits`.
ffi::Error PerRow(const ffi::AnyBuffer& logits, const ffi::AnyBuffer& b, ffi::DataType dtype, const char* op,
                  const char* name) {
  const auto dims = logits.dimensions();
  const int64_t cols = dims.size() ? dims.back() : 0;
  const int64_t rows = cols ? int64_t(logits.element_count()) / cols : 0;
  if (b.element_type() != dtype) {
    return InvalidArg(
        op, std::string(name) + " must be " + DtypeName(dtype) + ", got " + DtypeName(b.element_type()));
  }
  if (int64_t(b.element_count()) != rows || b.dimensions().size() + 1 != dims.size()) {
    return InvalidArg(op, std::string(name) + " must have one element per row of logits");
  }
  return ffi::Error::Success();
}

template <typename Args>
void SetAttrs(Args& p, const CrossEntropyAttrs& a) {
  p.smoothing = a.smoothing;
  p.z_loss = a.z_loss;
  p.has_ignore = a.has_ignore;
  p.ignore_index = a.ignore_index;
}

}  // namespace

ffi::ErrorOr<CrossEntropyFwdArgs> ReadCrossEntropyFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                                          const CrossEntropyAttrs& attrs) {
  size_t a = 0, r = 0;
  JAXDNN_TRY(logits, NextArg(args, a, kCeFwd, "logits"));
  JAXDNN_CHECK(CheckFloat(logits, kCeFwd, "logits"));
  JAXDNN_TRY(labels, NextArg(args, a, kCeFwd, "labels"));
  JAXDNN_CHECK(PerRow(logits, labels, ffi::DataType::S32, kCeFwd, "labels"));
  JAXDNN_TRY(loss, NextRet(rets, r, kCeFwd, "loss"));
  JAXDNN_CHECK(PerRow(logits, *loss, ffi::DataType::F32, kCeFwd, "loss"));
  JAXDNN_TRY(lse, NextRet(rets, r, kCeFwd, "lse"));
  JAXDNN_CHECK(PerRow(logits, *lse, ffi::DataType::F32, kCeFwd, "lse"));
  if (a != args.size() || r != rets.size()) {
    return ffi::Unexpected(InvalidArg(kCeFwd, "unexpected number of operands or results"));
  }
  JAXDNN_TRY(shape, ShapeOf(logits, kCeFwd));
  CrossEntropyFwdArgs p;
  p.shape = shape;
  p.dtype = logits.element_type();
  SetAttrs(p, attrs);
  p.logits = logits.untyped_data();
  p.labels = static_cast<const int32_t*>(labels.untyped_data());
  p.loss = static_cast<float*>(loss->untyped_data());
  p.lse = static_cast<float*>(lse->untyped_data());
  return p;
}

ffi::ErrorOr<CrossEntropyBwdArgs> ReadCrossEntropyBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                                          const CrossEntropyAttrs& attrs) {
  size_t a = 0, r = 0;
  JAXDNN_TRY(logits, NextArg(args, a, kCeBwd, "logits"));
  JAXDNN_CHECK(CheckFloat(logits, kCeBwd, "logits"));
  JAXDNN_TRY(labels, NextArg(args, a, kCeBwd, "labels"));
  JAXDNN_CHECK(PerRow(logits, labels, ffi::DataType::S32, kCeBwd, "labels"));
  JAXDNN_TRY(lse, NextArg(args, a, kCeBwd, "lse"));
  JAXDNN_CHECK(PerRow(logits, lse, ffi::DataType::F32, kCeBwd, "lse"));
  JAXDNN_TRY(g, NextArg(args, a, kCeBwd, "g"));
  JAXDNN_CHECK(PerRow(logits, g, ffi::DataType::F32, kCeBwd, "g"));
  JAXDNN_TRY(dlogits, NextRet(rets, r, kCeBwd, "dlogits"));
  JAXDNN_CHECK(SameAs(logits, *dlogits, kCeBwd, "dlogits", true));
  if (a != args.size() || r != rets.size()) {
    return ffi::Unexpected(InvalidArg(kCeBwd, "unexpected number of operands or results"));
  }
  JAXDNN_TRY(shape, ShapeOf(logits, kCeBwd));
  CrossEntropyBwdArgs p;
  p.shape = shape;
  p.dtype = logits.element_type();
  SetAttrs(p, attrs);
  p.logits = logits.untyped_data();
  p.labels = static_cast<const int32_t*>(labels.untyped_data());
  p.lse = static_cast<const float*>(lse.untyped_data());
  p.g = static_cast<const float*>(g.untyped_data());
  p.dlogits = dlogits->untyped_data();
  return p;
}

namespace {

constexpr const char* kSoftFwd = "jaxdnn soft cross-entropy forward";
constexpr const char* kSoftBwd = "jaxdnn soft cross-entropy backward";

}  // namespace

ffi::ErrorOr<SoftCrossEntropyFwdArgs> ReadSoftCrossEntropyFwdCall(ffi::RemainingArgs args,
                                                                  ffi::RemainingRets rets, float smoothing,
                                                                  float z_loss) {
  size_t a = 0, r = 0;
  JAXDNN_TRY(logits, NextArg(args, a, kSoftFwd, "logits"));
  JAXDNN_CHECK(CheckFloat(logits, kSoftFwd, "logits"));
  JAXDNN_TRY(targets, NextArg(args, a, kSoftFwd, "targets"));
  JAXDNN_CHECK(SameAs(logits, targets, kSoftFwd, "targets", true));
  SoftCrossEntropyFwdArgs p;
  float** outs[] = {&p.loss, &p.lse, &p.target_sum};
  const char* names[] = {"loss", "lse", "target_sum"};
  for (int i = 0; i < 3; ++i) {
    JAXDNN_TRY(out, NextRet(rets, r, kSoftFwd, names[i]));
    JAXDNN_CHECK(PerRow(logits, *out, ffi::DataType::F32, kSoftFwd, names[i]));
    *outs[i] = static_cast<float*>(out->untyped_data());
  }
  if (a != args.size() || r != rets.size()) {
    return ffi::Unexpected(InvalidArg(kSoftFwd, "unexpected number of operands or results"));
  }
  JAXDNN_TRY(shape, ShapeOf(logits, kSoftFwd));
  p.shape = shape;
  p.dtype = logits.element_type();
  p.smoothing = smoothing;
  p.z_loss = z_loss;
  p.logits = logits.untyped_data();
  p.targets = targets.untyped_data();
  return p;
}

ffi::ErrorOr<SoftCrossEntropyBwdArgs> ReadSoftCrossEntropyBwdCall(ffi::RemainingArgs args,
                                                                  ffi::RemainingRets rets, float smoothing) {
  size_t a = 0, r = 0;
  JAXDNN_TRY(logits, NextArg(args, a, kSoftBwd, "logits"));
  JAXDNN_CHECK(CheckFloat(logits, kSoftBwd, "logits"));
  JAXDNN_TRY(targets, NextArg(args, a, kSoftBwd, "targets"));
  JAXDNN_CHECK(SameAs(logits, targets, kSoftBwd, "targets", true));
  SoftCrossEntropyBwdArgs p;
  const float** rows[] = {&p.lse, &p.a, &p.b};
  const char* names[] = {"lse", "a", "b"};
  for (int i = 0; i < 3; ++i) {
    JAXDNN_TRY(in, NextArg(args, a, kSoftBwd, names[i]));
    JAXDNN_CHECK(PerRow(logits, in, ffi::DataType::F32, kSoftBwd, names[i]));
    *rows[i] = static_cast<const float*>(in.untyped_data());
  }
  JAXDNN_TRY(dlogits, NextRet(rets, r, kSoftBwd, "dlogits"));
  JAXDNN_CHECK(SameAs(logits, *dlogits, kSoftBwd, "dlogits", true));
  if (a != args.size() || r != rets.size()) {
    return ffi::Unexpected(InvalidArg(kSoftBwd, "unexpected number of operands or results"));
  }
  JAXDNN_TRY(shape, ShapeOf(logits, kSoftBwd));
  p.shape = shape;
  p.dtype = logits.element_type();
  p.smoothing = smoothing;
  p.logits = logits.untyped_data();
  p.targets = targets.untyped_data();
  p.dlogits = dlogits->untyped_data();
  return p;
}

}  // namespace jaxdnn::softmax
