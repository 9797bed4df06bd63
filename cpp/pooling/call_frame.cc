// Turns the pooling FFI call frames into their argument structs, checking
// every shape and dtype so that a malformed call fails with a message.
#include <string>

#include "common/call_frame.h"
#include "pooling/problem.h"

namespace jaxdnn::pooling {
namespace {

constexpr const char* kFwd = "jaxdnn pooling forward";
constexpr const char* kBwd = "jaxdnn pooling backward";

ffi::Error Rows(const ffi::AnyBuffer& b, const PoolGeometry& g, int64_t positions, const char* op,
                const char* name, bool index) {
  auto d = b.dimensions();
  if (d.size() != 2 || d[0] != g.batch || d[1] != positions * g.channels) {
    return InvalidArg(op, std::string(name) + " must be [batch, positions * channels]");
  }
  const auto t = b.element_type();
  if (index ? t != ffi::DataType::S32
            : (t != ffi::DataType::F32 && t != ffi::DataType::BF16 && t != ffi::DataType::F16)) {
    return InvalidArg(op, std::string(name) + " has an unsupported dtype");
  }
  return ffi::Error::Success();
}

}  // namespace

ffi::ErrorOr<PoolFwdArgs> ReadPoolFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                          const PoolGeometry& g, bool with_index) {
  size_t a = 0, r = 0;
  if (with_index && !g.max) return ffi::Unexpected(InvalidArg(kFwd, "with_index is for max pooling only"));
  JAXDNN_TRY(x, NextArg(args, a, kFwd, "x"));
  JAXDNN_CHECK(Rows(x, g, g.in_positions(), kFwd, "x", false));
  JAXDNN_TRY(y, NextRet(rets, r, kFwd, "y"));
  JAXDNN_CHECK(Rows(*y, g, g.out_positions(), kFwd, "y", false));
  if (y->element_type() != x.element_type())
    return ffi::Unexpected(InvalidArg(kFwd, "y must have x's dtype"));
  PoolFwdArgs p;
  p.g = g;
  p.dtype = x.element_type();
  p.x = x.untyped_data();
  p.y = y->untyped_data();
  if (with_index) {
    JAXDNN_TRY(index, NextRet(rets, r, kFwd, "index"));
    JAXDNN_CHECK(Rows(*index, g, g.out_positions(), kFwd, "index", true));
    p.index = static_cast<int32_t*>(index->untyped_data());
  }
  if (a != args.size() || r != rets.size()) {
    return ffi::Unexpected(InvalidArg(kFwd, "unexpected number of operands or results"));
  }
  return p;
}

ffi::ErrorOr<PoolBwdArgs> ReadPoolBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                          const PoolGeometry& g) {
  size_t a = 0, r = 0;
  JAXDNN_TRY(dy, NextArg(args, a, kBwd, "dy"));
  JAXDNN_CHECK(Rows(dy, g, g.out_positions(), kBwd, "dy", false));
  PoolBwdArgs p;
  p.g = g;
  p.dtype = dy.element_type();
  p.dy = dy.untyped_data();
  if (g.max) {
    JAXDNN_TRY(index, NextArg(args, a, kBwd, "index"));
    JAXDNN_CHECK(Rows(index, g, g.out_positions(), kBwd, "index", true));
    p.index = static_cast<const int32_t*>(index.untyped_data());
  }
  JAXDNN_TRY(dx, NextRet(rets, r, kBwd, "dx"));
  JAXDNN_CHECK(Rows(*dx, g, g.in_positions(), kBwd, "dx", false));
  if (dx->element_type() != dy.element_type())
    return ffi::Unexpected(InvalidArg(kBwd, "dx must have dy's dtype"));
  p.dx = dx->untyped_data();
  if (a != args.size() || r != rets.size()) {
    return ffi::Unexpected(InvalidArg(kBwd, "unexpected number of operands or results"));
  }
  return p;
}

}  // namespace jaxdnn::pooling
