// Turns the FFI call frames of the group norm into its argument structs,
// checking every shape and dtype so that a malformed call fails with a message.
#include <string>

#include "cnn_norms/problem.h"
#include "common/activation.h"
#include "common/call_frame.h"

namespace jaxdnn::cnn_norms {
namespace {

constexpr const char* kFwd = "jaxdnn group_norm forward";
constexpr const char* kBwd = "jaxdnn group_norm backward";

ffi::ErrorOr<GroupShape> ShapeOf(const ffi::AnyBuffer& x, int64_t channels, int64_t groups, const char* op) {
  auto d = x.dimensions();
  if (d.size() != 2) return ffi::Unexpected(InvalidArg(op, "x must be [samples, positions * channels]"));
  if (channels < 1 || groups < 1 || channels % groups != 0 || d[1] % channels != 0) {
    return ffi::Unexpected(InvalidArg(op, "channels must be a multiple of groups and divide x's row"));
  }
  const auto t = x.element_type();
  if (t != ffi::DataType::F32 && t != ffi::DataType::BF16 && t != ffi::DataType::F16) {
    return ffi::Unexpected(InvalidArg(op, std::string("x dtype ") + DtypeName(t) + " is not supported"));
  }
  GroupShape s;
  s.samples = d[0];
  s.channels = channels;
  s.positions = d[1] / channels;
  s.groups = groups;
  return s;
}

// A float32 [samples, width] buffer.
ffi::Error PerSample(const ffi::AnyBuffer& b, const GroupShape& s, int64_t width, const char* op,
                     const char* name) {
  auto d = b.dimensions();
  if (b.element_type() != ffi::DataType::F32 || d.size() != 2 || d[0] != s.samples || d[1] != width) {
    return InvalidArg(op, std::string(name) + " must be float32 [samples, " + std::to_string(width) + "]");
  }
  return ffi::Error::Success();
}

ffi::Error LikeX(const ffi::AnyBuffer& x, const ffi::AnyBuffer& b, const char* op, const char* name) {
  if (b.element_type() != x.element_type() || b.element_count() != x.element_count() ||
      b.dimensions().size() != 2) {
    return InvalidArg(op, std::string(name) + " must have x's shape and dtype");
  }
  return ffi::Error::Success();
}

// The CUDA workspace, the last result.
template <typename Args>
ffi::Error Workspace(ffi::RemainingRets rets, size_t& r, const char* op, Args& p) {
  auto ws = rets.get<ffi::AnyBuffer>(r++);
  if (!ws.has_value()) return InvalidArg(op, "missing result workspace");
  if ((*ws)->element_type() != ffi::DataType::F32) return InvalidArg(op, "workspace must be float32");
  p.workspace = static_cast<float*>((*ws)->untyped_data());
  p.workspace_elems = int64_t((*ws)->element_count());
  return ffi::Error::Success();
}

ffi::Error CheckAttrs(const GroupNormAttrs& a, const char* op) {
  if (a.act < 0 || a.act >= kNumActs) return InvalidArg(op, "unknown activation code");
  return ffi::Error::Success();
}

}  // namespace

ffi::ErrorOr<GroupNormFwdArgs> ReadGroupNormFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                                    int64_t channels, const GroupNormAttrs& attrs,
                                                    bool with_workspace) {
  size_t a = 0, r = 0;
  JAXDNN_CHECK(CheckAttrs(attrs, kFwd));
  JAXDNN_TRY(x, NextArg(args, a, kFwd, "x"));
  JAXDNN_TRY(shape, ShapeOf(x, channels, attrs.groups, kFwd));
  GroupNormFwdArgs p;
  p.shape = shape;
  p.attrs = attrs;
  p.dtype = x.element_type();
  p.x = x.untyped_data();
  JAXDNN_TRY(scale, NextArg(args, a, kFwd, "scale"));
  JAXDNN_CHECK(PerSample(scale, shape, channels, kFwd, "scale"));
  JAXDNN_TRY(bias, NextArg(args, a, kFwd, "bias"));
  JAXDNN_CHECK(PerSample(bias, shape, channels, kFwd, "bias"));
  p.scale = static_cast<const float*>(scale.untyped_data());
  p.bias = static_cast<const float*>(bias.untyped_data());
  if (attrs.has_residual) {
    JAXDNN_TRY(res, NextArg(args, a, kFwd, "residual"));
    JAXDNN_CHECK(LikeX(x, res, kFwd, "residual"));
    p.residual = res.untyped_data();
  }
  JAXDNN_TRY(y, NextRet(rets, r, kFwd, "y"));
  JAXDNN_CHECK(LikeX(x, *y, kFwd, "y"));
  JAXDNN_TRY(mean, NextRet(rets, r, kFwd, "mean"));
  JAXDNN_CHECK(PerSample(*mean, shape, attrs.groups, kFwd, "mean"));
  JAXDNN_TRY(rstd, NextRet(rets, r, kFwd, "rstd"));
  JAXDNN_CHECK(PerSample(*rstd, shape, attrs.groups, kFwd, "rstd"));
  if (with_workspace) JAXDNN_CHECK(Workspace(rets, r, kFwd, p));
  if (a != args.size() || r != rets.size()) {
    return ffi::Unexpected(InvalidArg(kFwd, "unexpected number of operands or results"));
  }
  p.y = y->untyped_data();
  p.mean = static_cast<float*>(mean->untyped_data());
  p.rstd = static_cast<float*>(rstd->untyped_data());
  return p;
}

ffi::ErrorOr<GroupNormBwdArgs> ReadGroupNormBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                                    int64_t channels, const GroupNormAttrs& attrs,
                                                    bool with_workspace) {
  size_t a = 0, r = 0;
  JAXDNN_CHECK(CheckAttrs(attrs, kBwd));
  JAXDNN_TRY(dy, NextArg(args, a, kBwd, "dy"));
  JAXDNN_TRY(x, NextArg(args, a, kBwd, "x"));
  JAXDNN_TRY(shape, ShapeOf(x, channels, attrs.groups, kBwd));
  JAXDNN_CHECK(LikeX(x, dy, kBwd, "dy"));
  GroupNormBwdArgs p;
  p.shape = shape;
  p.attrs = attrs;
  p.dtype = x.element_type();
  p.dy = dy.untyped_data();
  p.x = x.untyped_data();
  const float** params[] = {&p.scale, &p.bias, &p.mean, &p.rstd};
  const char* names[] = {"scale", "bias", "mean", "rstd"};
  for (int i = 0; i < 4; ++i) {
    JAXDNN_TRY(b, NextArg(args, a, kBwd, names[i]));
    JAXDNN_CHECK(PerSample(b, shape, i < 2 ? channels : attrs.groups, kBwd, names[i]));
    *params[i] = static_cast<const float*>(b.untyped_data());
  }
  if (attrs.has_residual) {
    JAXDNN_TRY(res, NextArg(args, a, kBwd, "residual"));
    JAXDNN_CHECK(LikeX(x, res, kBwd, "residual"));
    p.residual = res.untyped_data();
  }
  JAXDNN_TRY(dx, NextRet(rets, r, kBwd, "dx"));
  JAXDNN_CHECK(LikeX(x, *dx, kBwd, "dx"));
  JAXDNN_TRY(dscale, NextRet(rets, r, kBwd, "dscale"));
  JAXDNN_CHECK(PerSample(*dscale, shape, channels, kBwd, "dscale"));
  JAXDNN_TRY(dbias, NextRet(rets, r, kBwd, "dbias"));
  JAXDNN_CHECK(PerSample(*dbias, shape, channels, kBwd, "dbias"));
  p.dx = dx->untyped_data();
  p.dscale = static_cast<float*>(dscale->untyped_data());
  p.dbias = static_cast<float*>(dbias->untyped_data());
  if (attrs.has_residual) {
    JAXDNN_TRY(dres, NextRet(rets, r, kBwd, "dresidual"));
    JAXDNN_CHECK(LikeX(x, *dres, kBwd, "dresidual"));
    p.dresidual = dres->untyped_data();
  }
  if (with_workspace) JAXDNN_CHECK(Workspace(rets, r, kBwd, p));
  if (a != args.size() || r != rets.size()) {
    return ffi::Unexpected(InvalidArg(kBwd, "unexpected number of operands or results"));
  }
  return p;
}

}  // namespace jaxdnn::cnn_norms
