// Turns the convolution FFI call frames into their argument structs,
// checking every shape and dtype so that a malformed call fails with a
// message naming the operand.
#include <string>

#include "common/call_frame.h"
#include "conv/problem.h"

namespace jaxdnn::conv {
namespace {

constexpr const char* kFwd = "jaxdnn conv forward";
constexpr const char* kDgrad = "jaxdnn conv data gradient";
constexpr const char* kWgrad = "jaxdnn conv weight gradient";

bool IsFloat(ffi::DataType t) {
  return t == ffi::DataType::F32 || t == ffi::DataType::BF16 || t == ffi::DataType::F16;
}

ffi::Error Shape(const ffi::AnyBuffer& b, std::initializer_list<int64_t> dims, const char* op,
                 const char* name) {
  auto d = b.dimensions();
  bool ok = d.size() == dims.size();
  size_t k = 0;
  for (int64_t want : dims) ok = ok && d[k++] == want;
  if (!ok) return InvalidArg(op, std::string(name) + " has the wrong shape");
  if (!IsFloat(b.element_type())) return InvalidArg(op, std::string(name) + " has an unsupported dtype");
  return ffi::Error::Success();
}

ffi::Error Done(size_t a, size_t r, ffi::RemainingArgs args, ffi::RemainingRets rets, const char* op) {
  if (a != args.size() || r != rets.size()) return InvalidArg(op, "unexpected number of operands or results");
  return ffi::Error::Success();
}

// CUDA's workspace: the last result where the call has one (the CPU's have none).
ffi::Error Workspace(ffi::RemainingRets rets, size_t& r, const char* op, void** data, size_t* bytes) {
  if (r >= rets.size()) return ffi::Error::Success();
  auto ws = rets.get<ffi::AnyBuffer>(r++);
  if (!ws.has_value()) return InvalidArg(op, "cannot read the workspace");
  if ((*ws)->element_type() != ffi::DataType::U8) return InvalidArg(op, "workspace must be uint8");
  *data = (*ws)->untyped_data();
  *bytes = (*ws)->element_count();
  return ffi::Error::Success();
}

}  // namespace

ffi::ErrorOr<ConvFwdArgs> ReadConvFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                          const ConvGeometry& g, const Epilogue& e) {
  size_t a = 0, r = 0;
  const int64_t n = g.batch, xw = g.in_positions() * g.in_channels, yw = g.out_positions() * g.out_channels;
  ConvFwdArgs p;
  p.g = g;
  p.e = e;
  JAXDNN_TRY(x, NextArg(args, a, kFwd, "x"));
  JAXDNN_CHECK(Shape(x, {n, xw}, kFwd, "x"));
  JAXDNN_TRY(w, NextArg(args, a, kFwd, "w"));
  JAXDNN_CHECK(Shape(w, {g.weights()}, kFwd, "w"));
  if (w.element_type() != x.element_type()) return ffi::Unexpected(InvalidArg(kFwd, "w must have x's dtype"));
  p.dtype = x.element_type();
  p.x = x.untyped_data();
  p.w = w.untyped_data();
  if (e.has_bias) {
    JAXDNN_TRY(bias, NextArg(args, a, kFwd, "bias"));
    JAXDNN_CHECK(Shape(bias, {g.out_channels}, kFwd, "bias"));
    p.bias = bias.untyped_data();
    p.bias_dtype = bias.element_type();
  }
  if (e.has_residual) {
    JAXDNN_TRY(res, NextArg(args, a, kFwd, "residual"));
    JAXDNN_CHECK(Shape(res, {n, yw}, kFwd, "residual"));
    p.residual = res.untyped_data();
    p.residual_dtype = res.element_type();
  }
  JAXDNN_TRY(y, NextRet(rets, r, kFwd, "y"));
  JAXDNN_CHECK(Shape(*y, {n, yw}, kFwd, "y"));
  p.out_dtype = y->element_type();
  p.y = y->untyped_data();
  if (e.saved == kSavePreact) {
    JAXDNN_TRY(z, NextRet(rets, r, kFwd, "z"));
    JAXDNN_CHECK(Shape(*z, {n, yw}, kFwd, "z"));
    if (z->element_type() != p.out_dtype) return ffi::Unexpected(InvalidArg(kFwd, "z must have y's dtype"));
    p.z = z->untyped_data();
  }
  JAXDNN_CHECK(Workspace(rets, r, kFwd, &p.workspace, &p.workspace_bytes));
  JAXDNN_CHECK(Done(a, r, args, rets, kFwd));
  return p;
}

ffi::ErrorOr<ConvDgradArgs> ReadConvDgradCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                              const ConvGeometry& g, const Epilogue& e) {
  size_t a = 0, r = 0;
  const int64_t n = g.batch, xw = g.in_positions() * g.in_channels, yw = g.out_positions() * g.out_channels;
  ConvDgradArgs p;
  p.g = g;
  p.e = e;
  JAXDNN_TRY(dy, NextArg(args, a, kDgrad, "dy"));
  JAXDNN_CHECK(Shape(dy, {n, yw}, kDgrad, "dy"));
  JAXDNN_TRY(w, NextArg(args, a, kDgrad, "w"));
  JAXDNN_CHECK(Shape(w, {g.weights()}, kDgrad, "w"));
  p.dy = dy.untyped_data();
  p.dy_dtype = dy.element_type();
  p.w = w.untyped_data();
  p.dtype = w.element_type();
  if (e.saved != kSaveNothing) {
    JAXDNN_TRY(saved, NextArg(args, a, kDgrad, "saved"));
    JAXDNN_CHECK(Shape(saved, {n, yw}, kDgrad, "saved"));
    if (saved.element_type() != p.dy_dtype)
      return ffi::Unexpected(InvalidArg(kDgrad, "saved must have dy's dtype"));
    p.saved = saved.untyped_data();
  }
  JAXDNN_TRY(dx, NextRet(rets, r, kDgrad, "dx"));
  JAXDNN_CHECK(Shape(*dx, {n, xw}, kDgrad, "dx"));
  if (dx->element_type() != p.dtype) return ffi::Unexpected(InvalidArg(kDgrad, "dx must have w's dtype"));
  p.dx = dx->untyped_data();
  if (e.has_residual) {
    JAXDNN_TRY(dres, NextRet(rets, r, kDgrad, "d residual"));
    JAXDNN_CHECK(Shape(*dres, {n, yw}, kDgrad, "d residual"));
    p.dresidual = dres->untyped_data();
    p.residual_dtype = dres->element_type();
  }
  JAXDNN_CHECK(Workspace(rets, r, kDgrad, &p.workspace, &p.workspace_bytes));
  JAXDNN_CHECK(Done(a, r, args, rets, kDgrad));
  return p;
}

ffi::ErrorOr<ConvWgradArgs> ReadConvWgradCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                              const ConvGeometry& g, const Epilogue& e) {
  size_t a = 0, r = 0;
  const int64_t n = g.batch, xw = g.in_positions() * g.in_channels, yw = g.out_positions() * g.out_channels;
  ConvWgradArgs p;
  p.g = g;
  p.e = e;
  JAXDNN_TRY(x, NextArg(args, a, kWgrad, "x"));
  JAXDNN_CHECK(Shape(x, {n, xw}, kWgrad, "x"));
  JAXDNN_TRY(dy, NextArg(args, a, kWgrad, "dy"));
  JAXDNN_CHECK(Shape(dy, {n, yw}, kWgrad, "dy"));
  p.x = x.untyped_data();
  p.dtype = x.element_type();
  p.dy = dy.untyped_data();
  p.dy_dtype = dy.element_type();
  if (e.saved != kSaveNothing) {
    JAXDNN_TRY(saved, NextArg(args, a, kWgrad, "saved"));
    JAXDNN_CHECK(Shape(saved, {n, yw}, kWgrad, "saved"));
    if (saved.element_type() != p.dy_dtype)
      return ffi::Unexpected(InvalidArg(kWgrad, "saved must have dy's dtype"));
    p.saved = saved.untyped_data();
  }
  JAXDNN_TRY(dw, NextRet(rets, r, kWgrad, "dw"));
  JAXDNN_CHECK(Shape(*dw, {g.weights()}, kWgrad, "dw"));
  if (dw->element_type() != p.dtype) return ffi::Unexpected(InvalidArg(kWgrad, "dw must have x's dtype"));
  p.dw = dw->untyped_data();
  if (e.has_bias) {
    JAXDNN_TRY(dbias, NextRet(rets, r, kWgrad, "d bias"));
    JAXDNN_CHECK(Shape(*dbias, {g.out_channels}, kWgrad, "d bias"));
    p.dbias = dbias->untyped_data();
    p.bias_dtype = dbias->element_type();
  }
  JAXDNN_CHECK(Workspace(rets, r, kWgrad, &p.workspace, &p.workspace_bytes));
  JAXDNN_CHECK(Done(a, r, args, rets, kWgrad));
  return p;
}

}  // namespace jaxdnn::conv
