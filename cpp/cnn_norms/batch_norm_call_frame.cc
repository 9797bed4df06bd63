// Turns the FFI call frames of the BatchNorm steps into BatchNormArgs,
// checking every shape and dtype so that a malformed call fails with a message.
#include <optional>
#include <string>

#include "cnn_norms/batch_norm.h"
#include "common/activation.h"
#include "common/call_frame.h"

namespace jaxdnn::cnn_norms {
namespace {

const char* OpName(BatchNormStep step) {
  switch (step) {
    case BatchNormStep::kStats: return "jaxdnn batch_norm statistics";
    case BatchNormStep::kApply: return "jaxdnn batch_norm forward";
    case BatchNormStep::kBwdReduce: return "jaxdnn batch_norm backward sums";
    case BatchNormStep::kBwdApply: return "jaxdnn batch_norm backward";
  }
  return "jaxdnn batch_norm";
}

ffi::Error Channel(const ffi::AnyBuffer& b, int64_t channels, const char* op, const char* name) {
  auto d = b.dimensions();
  if (b.element_type() != ffi::DataType::F32 || d.size() != 1 || d[0] != channels) {
    return InvalidArg(op, std::string(name) + " must be float32 [channels]");
  }
  return ffi::Error::Success();
}

ffi::Error LikeX(const ffi::AnyBuffer& x, const ffi::AnyBuffer& b, const char* op, const char* name) {
  if (b.element_type() != x.element_type() || b.dimensions().size() != 2 ||
      b.element_count() != x.element_count() || b.dimensions()[1] != x.dimensions()[1]) {
    return InvalidArg(op, std::string(name) + " must have x's shape and dtype");
  }
  return ffi::Error::Success();
}

// The ReLU sign bits: uint8 [rows, channels / 8].
ffi::Error MaskLike(const ffi::AnyBuffer& x, const ffi::AnyBuffer& b, const char* op) {
  auto d = b.dimensions();
  if (b.element_type() != ffi::DataType::U8 || d.size() != 2 || d[0] != x.dimensions()[0] ||
      d[1] != x.dimensions()[1] / 8) {
    return InvalidArg(op, "mask must be uint8 [rows, channels / 8]");
  }
  return ffi::Error::Success();
}

}  // namespace

ffi::ErrorOr<BatchNormArgs> ReadBatchNormCall(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                              BatchNormStep step, const BatchNormAttrs& attrs,
                                              bool with_workspace) {
  const char* op = OpName(step);
  if (attrs.act < 0 || attrs.act >= kNumActs)
    return ffi::Unexpected(InvalidArg(op, "unknown activation code"));
  const bool residual = attrs.residual;
  const bool bwd = step == BatchNormStep::kBwdReduce || step == BatchNormStep::kBwdApply;
  size_t a = 0, r = 0;
  BatchNormArgs p;
  p.attrs = attrs;
  std::optional<ffi::AnyBuffer> dy_buf;
  if (bwd) {
    JAXDNN_TRY(dy, NextArg(args, a, op, "dy"));
    dy_buf = dy;
  }
  JAXDNN_TRY(x, NextArg(args, a, op, "x"));
  const auto t = x.element_type();
  if (x.dimensions().size() != 2 ||
      (t != ffi::DataType::F32 && t != ffi::DataType::BF16 && t != ffi::DataType::F16)) {
    return ffi::Unexpected(InvalidArg(op, "x must be float32, bfloat16 or float16 [rows, channels]"));
  }
  p.shape.rows = x.dimensions()[0];
  p.shape.channels = x.dimensions()[1];
  if (attrs.mask && (attrs.act != int32_t(Act::kRelu) || p.shape.channels % 8 != 0)) {
    return ffi::Unexpected(InvalidArg(op, "the sign mask needs relu and channels a multiple of 8"));
  }
  p.dtype = t;
  p.x = x.untyped_data();
  if (bwd) {
    JAXDNN_CHECK(LikeX(x, *dy_buf, op, "dy"));
    p.dy = dy_buf->untyped_data();
  }
  auto channel_arg = [&](const char* name, const float** out) -> ffi::Error {
    auto b = args.get<ffi::AnyBuffer>(a++);
    if (!b.has_value()) return InvalidArg(op, std::string("missing operand ") + name);
    if (auto e = Channel(*b, p.shape.channels, op, name); e.failure()) return e;
    *out = static_cast<const float*>(b->untyped_data());
    return ffi::Error::Success();
  };
  if (step == BatchNormStep::kStats) {
    JAXDNN_CHECK(channel_arg("shift", &p.shift));
  } else {
    JAXDNN_CHECK(channel_arg("shift", &p.shift));
    JAXDNN_CHECK(channel_arg("s1", &p.s1));
    JAXDNN_CHECK(channel_arg("s2", &p.s2));
    JAXDNN_CHECK(channel_arg("count", &p.count));
    JAXDNN_CHECK(channel_arg("running_var", &p.running_var));
    JAXDNN_CHECK(channel_arg("scale", &p.scale));
    JAXDNN_CHECK(channel_arg("bias", &p.bias));
    if (step == BatchNormStep::kBwdApply) {
      JAXDNN_CHECK(channel_arg("total_dz", &p.total_dz));
      JAXDNN_CHECK(channel_arg("total_dzx", &p.total_dzx));
    }
    if (attrs.mask && bwd) {
      JAXDNN_TRY(m, NextArg(args, a, op, "mask"));
      JAXDNN_CHECK(MaskLike(x, m, op));
      p.mask = static_cast<const uint8_t*>(m.untyped_data());
    } else if (residual) {
      JAXDNN_TRY(res, NextArg(args, a, op, "residual"));
      JAXDNN_CHECK(LikeX(x, res, op, "residual"));
      p.residual = res.untyped_data();
    }
  }
  auto channel_ret = [&](const char* name, float** out) -> ffi::Error {
    auto b = rets.get<ffi::AnyBuffer>(r++);
    if (!b.has_value()) return InvalidArg(op, std::string("missing result ") + name);
    if (auto e = Channel(**b, p.shape.channels, op, name); e.failure()) return e;
    *out = static_cast<float*>((*b)->untyped_data());
    return ffi::Error::Success();
  };
  if (step == BatchNormStep::kStats || step == BatchNormStep::kBwdReduce) {
    JAXDNN_CHECK(channel_ret("sum1", &p.out1));
    JAXDNN_CHECK(channel_ret("sum2", &p.out2));
    if (with_workspace) {
      JAXDNN_TRY(ws, NextRet(rets, r, op, "workspace"));
      if (ws->element_type() != ffi::DataType::F32) {
        return ffi::Unexpected(InvalidArg(op, "workspace must be float32"));
      }
      p.partials = static_cast<float*>(ws->untyped_data());
      p.workspace_elems = int64_t(ws->element_count());
    }
  } else {
    JAXDNN_TRY(y, NextRet(rets, r, op, bwd ? "dx" : "y"));
    JAXDNN_CHECK(LikeX(x, *y, op, bwd ? "dx" : "y"));
    p.y = y->untyped_data();
    if (!bwd) {
      JAXDNN_CHECK(channel_ret("running_mean", &p.out1));
      JAXDNN_CHECK(channel_ret("running_var", &p.out2));
      if (attrs.mask) {
        JAXDNN_TRY(m, NextRet(rets, r, op, "mask"));
        JAXDNN_CHECK(MaskLike(x, *m, op));
        p.mask_out = static_cast<uint8_t*>(m->untyped_data());
      }
    }
    if (bwd && residual) {
      JAXDNN_TRY(dres, NextRet(rets, r, op, "dresidual"));
      JAXDNN_CHECK(LikeX(x, *dres, op, "dresidual"));
      p.dresidual = dres->untyped_data();
    }
  }
  if (a != args.size() || r != rets.size()) {
    return ffi::Unexpected(InvalidArg(op, "unexpected number of operands or results"));
  }
  return p;
}

}  // namespace jaxdnn::cnn_norms
