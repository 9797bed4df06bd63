// Turns the FFI call frame into AttnFwdArgs / AttnBwdArgs, checking every
// shape and dtype so that a malformed call fails with a message, not a crash.
//
// Operand order (optional ones present when their OperandBits bit is set):
//   forward:  q, k, v, [bias], [mask], [q_lengths], [kv_lengths],
//             [q_segment_ids, kv_segment_ids], [seeds]    -> out, lse, [workspace]
//   backward: q, k, v, out, lse, dout, [dlse], then the forward's optional
//             operands                                    -> dq, dk, dv, [dbias], [workspace]
#include <string>

#include "common/call_frame.h"

#include "attention/problem.h"

namespace jaxdnn::attention {
namespace {

constexpr const char* kOp = "jaxdnn attention";

ffi::Error Fail(const std::string& what) { return InvalidArg(kOp, what); }

template <typename List>
ffi::ErrorOr<ffi::AnyBuffer> Arg(const List& list, size_t& i, const char* name) {
  return NextArg(list, i, kOp, name);
}

template <typename List>
ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> Ret(const List& list, size_t& i, const char* name) {
  return NextRet(list, i, kOp, name);
}

bool IsFloat(ffi::DataType t) {
  return t == ffi::DataType::F32 || t == ffi::DataType::BF16 || t == ffi::DataType::F16;
}

ffi::Error CheckDims(const ffi::AnyBuffer& b, std::initializer_list<int64_t> want, ffi::DataType dtype,
                     const char* name) {
  auto dims = b.dimensions();
  bool ok = dims.size() == want.size() && b.element_type() == dtype;
  size_t i = 0;
  for (int64_t w : want) ok = ok && dims[i++] == w;
  if (!ok) return Fail(std::string(name) + " has the wrong shape or dtype");
  return ffi::Error::Success();
}

// own_value_dim: value may have a head dim of its own (the forward: MLA),
// which the shape records as value_dim; the launchers refuse what they lack.
ffi::ErrorOr<AttnShape> ShapeOf(const ffi::AnyBuffer& q, const ffi::AnyBuffer& k, const ffi::AnyBuffer& v,
                                bool own_value_dim = false) {
  auto qd = q.dimensions(), kd = k.dimensions();
  if (qd.size() != 4 || kd.size() != 4) {
    return ffi::Unexpected(Fail("query and key must be [batch, seq, heads, head_dim]"));
  }
  if (!IsFloat(q.element_type())) return ffi::Unexpected(Fail("query dtype is not a float type"));
  AttnShape s;
  s.batch = qd[0];
  s.q_len = qd[1];
  s.heads = qd[2];
  s.head_dim = qd[3];
  s.kv_len = kd[1];
  s.kv_heads = kd[2];
  if (kd[0] != s.batch || kd[3] != s.head_dim || k.element_type() != q.element_type()) {
    return ffi::Unexpected(Fail("key must match query's batch, head_dim and dtype"));
  }
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0) {
    return ffi::Unexpected(Fail("key heads must divide query heads"));
  }
  auto vd = v.dimensions();
  if (own_value_dim && vd.size() == 4 && vd[3] > 0 && vd[3] != s.head_dim) s.value_dim = vd[3];
  ffi::Error e = CheckDims(v, {s.batch, s.kv_len, s.kv_heads, s.vdim()}, q.element_type(), "value");
  if (e.failure()) return ffi::Unexpected(std::move(e));
  return s;
}

// A 4-D operand broadcastable to [batch, heads, q_len, kv_len].
ffi::ErrorOr<Broadcast4> BroadcastOf(const ffi::AnyBuffer& b, const AttnShape& s, const char* name) {
  auto d = b.dimensions();
  const int64_t full[4] = {s.batch, s.heads, s.q_len, s.kv_len};
  if (d.size() != 4) return ffi::Unexpected(Fail(std::string(name) + " must be 4-D"));
  Broadcast4 r;
  r.data = b.untyped_data();
  int64_t stride = 1;
  int64_t strides[4];
  for (int i = 3; i >= 0; --i) {
    if (d[i] != 1 && d[i] != full[i]) {
      return ffi::Unexpected(
          Fail(std::string(name) + " is not broadcastable to [batch, heads, q_len, kv_len]"));
    }
    r.dims[i] = d[i];
    strides[i] = d[i] == 1 ? 0 : stride;
    stride *= d[i];
  }
  r.stride_b = strides[0];
  r.stride_h = strides[1];
  r.stride_t = strides[2];
  r.stride_s = strides[3];
  return r;
}

// The optional operands after the fixed ones, shared by both directions.
struct Optionals {
  Broadcast4 bias, mask;
  ffi::DataType bias_dtype = ffi::DataType::F32;
};

ffi::ErrorOr<Optionals> ReadOptionals(ffi::RemainingArgs args, size_t& a, int32_t operands,
                                      const AttnShape& s, AttnMaskParams& m) {
  Optionals o;
  if (operands & kHasBias) {
    JAXDNN_TRY(bias, Arg(args, a, "bias"));
    if (!IsFloat(bias.element_type())) return ffi::Unexpected(Fail("bias must be a float type"));
    JAXDNN_TRY(bc, BroadcastOf(bias, s, "bias"));
    o.bias = bc;
    o.bias_dtype = bias.element_type();
  }
  if (operands & kHasMask) {
    JAXDNN_TRY(mask, Arg(args, a, "mask"));
    if (mask.element_type() != ffi::DataType::PRED) return ffi::Unexpected(Fail("mask must be bool"));
    JAXDNN_TRY(bc, BroadcastOf(mask, s, "mask"));
    o.mask = bc;
  }
  if (operands & kHasQLengths) {
    JAXDNN_TRY(len, Arg(args, a, "query_seq_lengths"));
    JAXDNN_CHECK(CheckDims(len, {s.batch}, ffi::DataType::S32, "query_seq_lengths"));
    m.q_lengths = static_cast<const int32_t*>(len.untyped_data());
  }
  if (operands & kHasKvLengths) {
    JAXDNN_TRY(len, Arg(args, a, "key_value_seq_lengths"));
    JAXDNN_CHECK(CheckDims(len, {s.batch}, ffi::DataType::S32, "key_value_seq_lengths"));
    m.kv_lengths = static_cast<const int32_t*>(len.untyped_data());
  }
  if (operands & kHasSegments) {
    JAXDNN_TRY(qs, Arg(args, a, "query_segment_ids"));
    JAXDNN_TRY(ks, Arg(args, a, "key_value_segment_ids"));
    JAXDNN_CHECK(CheckDims(qs, {s.batch, s.q_len}, ffi::DataType::S32, "query_segment_ids"));
    JAXDNN_CHECK(CheckDims(ks, {s.batch, s.kv_len}, ffi::DataType::S32, "key_value_segment_ids"));
    m.q_segments = static_cast<const int32_t*>(qs.untyped_data());
    m.kv_segments = static_cast<const int32_t*>(ks.untyped_data());
  }
  if (operands & kHasDropout) {
    JAXDNN_TRY(seeds, Arg(args, a, "dropout seeds"));
    JAXDNN_CHECK(CheckDims(seeds, {s.batch, 2}, ffi::DataType::U32, "dropout seeds"));
    m.seeds = static_cast<const uint32_t*>(seeds.untyped_data());
  }
  return o;
}

ffi::ErrorOr<AttnMaskParams> MaskParams(float scale, float softcap, int32_t causal, int32_t wl, int32_t wr,
                                        float dropout_rate) {
  if (wl < -1 || wr < -1) return ffi::Unexpected(Fail("window sides must be >= 0 (or -1: none)"));
  if (!(dropout_rate >= 0.f && dropout_rate < 1.f)) {
    return ffi::Unexpected(Fail("dropout_rate must be in [0, 1)"));
  }
  AttnMaskParams m;
  m.scale = scale;
  m.softcap = softcap;
  m.causal = causal != 0;
  m.window_left = wl;
  m.window_right = wr;
  m.dropout_rate = dropout_rate;
  return m;
}

// The forward's results: out, lse, then (CUDA, when Python sized one) the
// float32 workspace.
ffi::Error ReadFwdResults(ffi::RemainingRets rets, AttnFwdArgs& p) {
  const AttnShape& s = p.shape;
  size_t r = 0;
  auto out = Ret(rets, r, "out");
  if (!out.has_value()) return out.error();
  if (ffi::Error e = CheckDims(**out, {s.batch, s.q_len, s.heads, s.vdim()}, p.dtype, "out"); e.failure()) {
    return e;
  }
  auto lse = Ret(rets, r, "lse");
  if (!lse.has_value()) return lse.error();
  if (ffi::Error e = CheckDims(**lse, {s.batch, s.heads, s.q_len}, ffi::DataType::F32, "lse"); e.failure()) {
    return e;
  }
  p.out = (*out)->untyped_data();
  p.lse = static_cast<float*>((*lse)->untyped_data());
  if (rets.size() > r) {  // CUDA: the split-KV decode path's scratch, when Python sized one
    auto ws = Ret(rets, r, "workspace");
    if (!ws.has_value()) return ws.error();
    if ((*ws)->element_type() != ffi::DataType::F32) return Fail("workspace must be float32");
    p.workspace = static_cast<float*>((*ws)->untyped_data());
    p.workspace_elems = int64_t((*ws)->element_count());
  }
  return ffi::Error::Success();
}

}  // namespace

ffi::ErrorOr<AttnFwdArgs> ReadFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t operands,
                                      float scale, float softcap, int32_t causal, int32_t window_left,
                                      int32_t window_right, float dropout_rate) {
  size_t a = 0, r = 0;
  AttnFwdArgs p{};
  JAXDNN_TRY(m, MaskParams(scale, softcap, causal, window_left, window_right, dropout_rate));
  JAXDNN_TRY(q, Arg(args, a, "query"));
  JAXDNN_TRY(k, Arg(args, a, "key"));
  JAXDNN_TRY(v, Arg(args, a, "value"));
  JAXDNN_TRY(s, ShapeOf(q, k, v, /*own_value_dim=*/true));
  JAXDNN_TRY(opt, ReadOptionals(args, a, operands, s, m));
  p.shape = s;
  p.dtype = q.element_type();
  p.q = q.untyped_data();
  p.k = k.untyped_data();
  p.v = v.untyped_data();
  p.bias = opt.bias;
  p.bias_dtype = opt.bias_dtype;
  p.mask = opt.mask;
  p.mask_params = m;
  JAXDNN_CHECK(ReadFwdResults(rets, p));
  return p;
}

ffi::ErrorOr<AttnFwdArgs> ReadPagedFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, float scale,
                                           float softcap, int32_t window_left, int32_t window_right) {
  size_t a = 0;
  AttnFwdArgs p{};
  JAXDNN_TRY(m, MaskParams(scale, softcap, /*causal=*/1, window_left, window_right, 0.f));
  JAXDNN_TRY(q, Arg(args, a, "query"));
  JAXDNN_TRY(k, Arg(args, a, "key_cache"));
  JAXDNN_TRY(v, Arg(args, a, "value_cache"));
  JAXDNN_TRY(tables, Arg(args, a, "block_tables"));
  JAXDNN_TRY(lengths, Arg(args, a, "context_lengths"));
  auto qd = q.dimensions(), kd = k.dimensions(), td = tables.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || td.size() != 2) {
    return ffi::Unexpected(
        Fail("paged attention takes query [batch, q_len, heads, head_dim], caches "
             "[num_blocks, block_size, kv_heads, head_dim], block_tables [batch, max_blocks]"));
  }
  if (!IsFloat(q.element_type()) || k.element_type() != q.element_type()) {
    return ffi::Unexpected(Fail("query and key_cache must be one float dtype"));
  }
  AttnShape s;
  s.batch = qd[0];
  s.q_len = qd[1];
  s.heads = qd[2];
  s.head_dim = qd[3];
  s.kv_heads = kd[2];
  if (kd[3] != s.head_dim || kd[0] < 1 || kd[1] < 1) {
    return ffi::Unexpected(Fail("key_cache must have query's head_dim and at least one block of one row"));
  }
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0) {
    return ffi::Unexpected(Fail("key heads must divide query heads"));
  }
  JAXDNN_CHECK(CheckDims(v, {kd[0], kd[1], kd[2], kd[3]}, q.element_type(), "value_cache"));
  JAXDNN_CHECK(CheckDims(tables, {s.batch, td[1]}, ffi::DataType::S32, "block_tables"));
  JAXDNN_CHECK(CheckDims(lengths, {s.batch}, ffi::DataType::S32, "context_lengths"));
  p.paged.block_tables = static_cast<const int32_t*>(tables.untyped_data());
  p.paged.max_blocks = td[1];
  p.paged.num_blocks = kd[0];
  p.paged.block_size = kd[1];
  s.kv_len = td[1] * kd[1];  // the span the tables can hold; each row's context length masks it
  m.kv_lengths = static_cast<const int32_t*>(lengths.untyped_data());
  p.shape = s;
  p.dtype = q.element_type();
  p.q = q.untyped_data();
  p.k = k.untyped_data();
  p.v = v.untyped_data();
  p.mask_params = m;
  JAXDNN_CHECK(ReadFwdResults(rets, p));
  return p;
}

ffi::ErrorOr<AttnBwdArgs> ReadBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t operands,
                                      float scale, float softcap, int32_t causal, int32_t window_left,
                                      int32_t window_right, float dropout_rate, bool has_workspace) {
  size_t a = 0, r = 0;
  AttnBwdArgs p{};
  JAXDNN_TRY(m, MaskParams(scale, softcap, causal, window_left, window_right, dropout_rate));
  JAXDNN_TRY(q, Arg(args, a, "query"));
  JAXDNN_TRY(k, Arg(args, a, "key"));
  JAXDNN_TRY(v, Arg(args, a, "value"));
  JAXDNN_TRY(s, ShapeOf(q, k, v));
  JAXDNN_TRY(out, Arg(args, a, "out"));
  JAXDNN_TRY(lse, Arg(args, a, "lse"));
  JAXDNN_TRY(dout, Arg(args, a, "dout"));
  const ffi::DataType t = q.element_type();
  JAXDNN_CHECK(CheckDims(out, {s.batch, s.q_len, s.heads, s.head_dim}, t, "out"));
  JAXDNN_CHECK(CheckDims(dout, {s.batch, s.q_len, s.heads, s.head_dim}, t, "dout"));
  JAXDNN_CHECK(CheckDims(lse, {s.batch, s.heads, s.q_len}, ffi::DataType::F32, "lse"));
  if (operands & kHasDlse) {
    JAXDNN_TRY(dlse, Arg(args, a, "dlse"));
    JAXDNN_CHECK(CheckDims(dlse, {s.batch, s.heads, s.q_len}, ffi::DataType::F32, "dlse"));
    p.dlse = static_cast<const float*>(dlse.untyped_data());
  }
  JAXDNN_TRY(opt, ReadOptionals(args, a, operands, s, m));
  p.shape = s;
  p.dtype = t;
  p.q = q.untyped_data();
  p.k = k.untyped_data();
  p.v = v.untyped_data();
  p.out = out.untyped_data();
  p.lse = static_cast<const float*>(lse.untyped_data());
  p.dout = dout.untyped_data();
  p.bias = opt.bias;
  p.bias_dtype = opt.bias_dtype;
  p.mask = opt.mask;
  p.mask_params = m;
  JAXDNN_TRY(dq, Ret(rets, r, "dq"));
  JAXDNN_TRY(dk, Ret(rets, r, "dk"));
  JAXDNN_TRY(dv, Ret(rets, r, "dv"));
  JAXDNN_CHECK(CheckDims(*dq, {s.batch, s.q_len, s.heads, s.head_dim}, t, "dq"));
  JAXDNN_CHECK(CheckDims(*dk, {s.batch, s.kv_len, s.kv_heads, s.head_dim}, t, "dk"));
  JAXDNN_CHECK(CheckDims(*dv, {s.batch, s.kv_len, s.kv_heads, s.head_dim}, t, "dv"));
  p.dq = dq->untyped_data();
  p.dk = dk->untyped_data();
  p.dv = dv->untyped_data();
  if (operands & kWantDbias) {
    if (!(operands & kHasBias)) return ffi::Unexpected(Fail("dbias asked for without a bias"));
    JAXDNN_TRY(dbias, Ret(rets, r, "dbias"));
    JAXDNN_CHECK(CheckDims(*dbias, {p.bias.dims[0], p.bias.dims[1], p.bias.dims[2], p.bias.dims[3]},
                           ffi::DataType::F32, "dbias"));
    p.dbias = static_cast<float*>(dbias->untyped_data());
  }
  if (has_workspace) {
    JAXDNN_TRY(ws, Ret(rets, r, "workspace"));
    if (ws->element_type() != ffi::DataType::F32) return ffi::Unexpected(Fail("workspace must be float32"));
    p.workspace = static_cast<float*>(ws->untyped_data());
    p.workspace_elems = int64_t(ws->element_count());
  }
  return p;
}

}  // namespace jaxdnn::attention
