// Turns the FFI call frame into NormFwdArgs / NormBwdArgs, checking every
// shape and dtype so that a malformed call fails with a message, not a crash.
#include "norms/problem.h"

#include <string>

#include "common/call_frame.h"

namespace jaxdnn::norms {
namespace {

constexpr const char* kOp = "jaxdnn norm";

bool IsSupportedFloat(ffi::DataType t) {
  return t == ffi::DataType::F32 || t == ffi::DataType::BF16 || t == ffi::DataType::F16;
}

template <typename List>
ffi::ErrorOr<ffi::AnyBuffer> Arg(const List& list, size_t& i, const char* name) {
  return NextArg(list, i, kOp, name);
}

template <typename List>
ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> Ret(const List& list, size_t& i, const char* name) {
  return NextRet(list, i, kOp, name);
}

ffi::Error CheckLike(const ffi::AnyBuffer& ref, const ffi::AnyBuffer& b, const char* name) {
  if (b.element_type() != ref.element_type() || b.element_count() != ref.element_count() ||
      LastDim(b) != LastDim(ref)) {
    return InvalidArg(kOp, std::string(name) + " must have x's shape and dtype");
  }
  return ffi::Error::Success();
}

// A parameter (or its gradient) of dtype `want`, the one scale has (float32
// or x's dtype).
ffi::Error CheckParam(const ffi::AnyBuffer& b, const NormShape& s, ffi::DataType want, const char* name) {
  if (b.element_type() != want) {
    return InvalidArg(kOp, std::string(name) + " must have scale's dtype " + DtypeName(want) + ", got " +
                               DtypeName(b.element_type()));
  }
  if (LastDim(b) != s.dim || int64_t(b.element_count()) % (s.dim ? s.dim : 1) != 0) {
    return InvalidArg(kOp, std::string(name) + " must be [groups, dim]");
  }
  const int64_t groups = s.dim ? int64_t(b.element_count()) / s.dim : 1;
  if (groups != s.groups) return InvalidArg(kOp, std::string(name) + " has the wrong group count");
  return ffi::Error::Success();
}

// The parameters' dtype, from scale: float32 or x's dtype.
ffi::ErrorOr<ffi::DataType> ParamDtype(const ffi::AnyBuffer& x, const ffi::AnyBuffer& scale) {
  const ffi::DataType t = scale.element_type();
  if (t != ffi::DataType::F32 && t != x.element_type()) {
    return ffi::Unexpected(InvalidArg(kOp, std::string("scale must be float32 or x's dtype ") +
                                               DtypeName(x.element_type()) + ", got " + DtypeName(t)));
  }
  return t;
}

ffi::Error CheckStat(const ffi::AnyBuffer& b, const NormShape& s, const char* name) {
  if (b.element_type() != ffi::DataType::F32 || int64_t(b.element_count()) != s.rows) {
    return InvalidArg(kOp, std::string(name) + " must be float32 with one entry per row");
  }
  return ffi::Error::Success();
}

ffi::ErrorOr<NormShape> ShapeOf(const ffi::AnyBuffer& x, const ffi::AnyBuffer& scale) {
  if (!IsSupportedFloat(x.element_type())) {
    return ffi::Unexpected(InvalidArg(
        kOp, std::string("x dtype ") + DtypeName(x.element_type()) + " is not float32, bfloat16 or float16"));
  }
  NormShape s;
  s.dim = LastDim(x);
  if (s.dim <= 0) return ffi::Unexpected(InvalidArg(kOp, "the normalized axis is empty"));
  s.rows = int64_t(x.element_count()) / s.dim;
  s.groups = int64_t(scale.element_count()) / s.dim;
  if (s.groups <= 0 || s.rows % s.groups != 0) {
    return ffi::Unexpected(InvalidArg(kOp, "scale groups must divide the rows of x"));
  }
  return s;
}

}  // namespace

ffi::ErrorOr<NormFwdArgs> ReadFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t kind,
                                      bool residual, float epsilon) {
  if (kind != 0 && kind != 1) return ffi::Unexpected(InvalidArg(kOp, "unknown norm kind"));
  const bool layer = kind == int32_t(NormKind::kLayer);
  size_t a = 0, r = 0;
  NormFwdArgs p{};
  p.kind = NormKind(kind);
  p.epsilon = epsilon;
  JAXDNN_TRY(x, Arg(args, a, "x"));
  ffi::AnyBuffer res = x;
  if (residual) {
    JAXDNN_TRY(rr, Arg(args, a, "residual"));
    res = rr;
  }
  JAXDNN_TRY(scale, Arg(args, a, "scale"));
  JAXDNN_TRY(shape, ShapeOf(x, scale));
  JAXDNN_TRY(pdtype, ParamDtype(x, scale));
  JAXDNN_CHECK(CheckParam(scale, shape, pdtype, "scale"));
  p.shape = shape;
  p.dtype = x.element_type();
  p.x = x.untyped_data();
  p.scale = scale.untyped_data();
  p.params16 = pdtype != ffi::DataType::F32;
  if (residual) {
    JAXDNN_CHECK(CheckLike(x, res, "residual"));
    p.residual = res.untyped_data();
  }
  if (layer) {
    JAXDNN_TRY(bias, Arg(args, a, "bias"));
    JAXDNN_CHECK(CheckParam(bias, shape, pdtype, "bias"));
    p.bias = bias.untyped_data();
  }
  JAXDNN_TRY(y, Ret(rets, r, "y"));
  JAXDNN_CHECK(CheckLike(x, *y, "y"));
  p.y = y->untyped_data();
  if (residual) {
    JAXDNN_TRY(z, Ret(rets, r, "z"));
    JAXDNN_CHECK(CheckLike(x, *z, "z"));
    p.z = z->untyped_data();
  }
  if (layer) {
    JAXDNN_TRY(mean, Ret(rets, r, "mean"));
    JAXDNN_CHECK(CheckStat(*mean, shape, "mean"));
    p.mean = static_cast<float*>(mean->untyped_data());
  }
  JAXDNN_TRY(rstd, Ret(rets, r, "rstd"));
  JAXDNN_CHECK(CheckStat(*rstd, shape, "rstd"));
  p.rstd = static_cast<float*>(rstd->untyped_data());
  return p;
}

ffi::ErrorOr<NormBwdArgs> ReadBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t kind,
                                      bool residual, bool has_workspace) {
  if (kind != 0 && kind != 1) return ffi::Unexpected(InvalidArg(kOp, "unknown norm kind"));
  const bool layer = kind == int32_t(NormKind::kLayer);
  size_t a = 0, r = 0;
  NormBwdArgs p{};
  p.kind = NormKind(kind);
  JAXDNN_TRY(dy, Arg(args, a, "dy"));
  JAXDNN_TRY(z, Arg(args, a, "z"));
  JAXDNN_TRY(scale, Arg(args, a, "scale"));
  JAXDNN_TRY(shape, ShapeOf(z, scale));
  JAXDNN_CHECK(CheckLike(z, dy, "dy"));
  JAXDNN_TRY(pdtype, ParamDtype(z, scale));
  JAXDNN_CHECK(CheckParam(scale, shape, pdtype, "scale"));
  p.shape = shape;
  p.dtype = z.element_type();
  p.dy = dy.untyped_data();
  p.z = z.untyped_data();
  p.scale = scale.untyped_data();
  p.params16 = pdtype != ffi::DataType::F32;
  if (layer) {
    JAXDNN_TRY(mean, Arg(args, a, "mean"));
    JAXDNN_CHECK(CheckStat(mean, shape, "mean"));
    p.mean = static_cast<const float*>(mean.untyped_data());
  }
  JAXDNN_TRY(rstd, Arg(args, a, "rstd"));
  JAXDNN_CHECK(CheckStat(rstd, shape, "rstd"));
  p.rstd = static_cast<const float*>(rstd.untyped_data());
  if (residual) {
    JAXDNN_TRY(dsum, Arg(args, a, "dsum"));
    JAXDNN_CHECK(CheckLike(z, dsum, "dsum"));
    p.dsum = dsum.untyped_data();
  }
  JAXDNN_TRY(dx, Ret(rets, r, "dx"));
  JAXDNN_CHECK(CheckLike(z, *dx, "dx"));
  p.dx = dx->untyped_data();
  JAXDNN_TRY(dscale, Ret(rets, r, "dscale"));
  JAXDNN_CHECK(CheckParam(*dscale, shape, pdtype, "dscale"));
  p.dscale = dscale->untyped_data();
  if (layer) {
    JAXDNN_TRY(dbias, Ret(rets, r, "dbias"));
    JAXDNN_CHECK(CheckParam(*dbias, shape, pdtype, "dbias"));
    p.dbias = dbias->untyped_data();
  }
  if (has_workspace) {
    JAXDNN_TRY(ws, Ret(rets, r, "workspace"));
    const int64_t per_partial = 2 * shape.dim * shape.groups;
    if (ws->element_type() != ffi::DataType::F32 || int64_t(ws->element_count()) % per_partial != 0 ||
        ws->element_count() == 0) {
      return ffi::Unexpected(InvalidArg(kOp, "workspace must be float32 [groups, partials, 2, dim]"));
    }
    p.partials = static_cast<float*>(ws->untyped_data());
    p.num_partials = int64_t(ws->element_count()) / per_partial;
  }
  return p;
}

}  // namespace jaxdnn::norms
