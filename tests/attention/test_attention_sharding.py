"""Attention sharded over batch and heads on 4 CPU devices: same answers, no data movement."""

import jax
import jax.numpy as jnp
import pytest
from attention_cases import (
  BWD_TARGET,
  FWD_TARGET,
  Dims,
  assert_close,
  bias_of,
  context_parallel_and_whole,
  cotangent_like,
  jit,
  key,
  lengths,
  rand,
  segment_ids,
)
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxdnn

pytestmark = pytest.mark.skipif(len(jax.devices()) < 4, reason="needs 4 devices")

MOVES = ("all-gather", "all-to-all", "collective-permute")

# name: (mesh shape, mesh axis names, dims, mesh axis of the batch, of the heads)
LAYOUTS = {
  "batch": ((4,), ("data",), Dims(4, 33, 33, 4, 2, 64), "data", None),
  "heads_gqa2": ((4,), ("model",), Dims(2, 33, 33, 8, 4, 64), None, "model"),
  "heads_mqa": ((4,), ("model",), Dims(2, 7, 33, 8, 1, 64), None, "model"),
  "batch_heads_gqa4": ((2, 2), ("data", "model"), Dims(2, 33, 7, 8, 2, 64), "data", "model"),
}


def _layout(name):
  shape, names, dims, b, h = LAYOUTS[name]
  mesh = jax.make_mesh(shape, names)
  kv_h = h if dims.kv_heads > 1 else None  # MQA: the one kv head is replicated
  specs = dict(
    q=P(b, None, h, None),
    kv=P(b, None, kv_h, None),
    bias_full=P(b, h, None, None),
    bias_1NTS=P(None, h, None, None),
    lengths=P(b),
    seg=P(b, None),
  )
  put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, specs[spec]))
  return mesh, dims, specs, put


def _kv_replicated_over_heads(layout):
  _, _, dims, _, heads_axis = LAYOUTS[layout]
  return heads_axis is not None and dims.kv_heads == 1


def _inputs(dims, put, bias_kind):
  q = rand((dims.batch, dims.q_len, dims.heads, dims.head_dim))
  k = rand((dims.batch, dims.kv_len, dims.kv_heads, dims.head_dim))
  v = rand((dims.batch, dims.kv_len, dims.kv_heads, dims.head_dim))
  arrays = dict(
    query_segment_ids=segment_ids(dims.batch, dims.q_len),
    key_value_segment_ids=segment_ids(dims.batch, dims.kv_len),
    key_value_seq_lengths=lengths(dims.batch, dims.kv_len),
  )
  bias = bias_of(dims, "BNTS" if bias_kind == "full" else "1NTS")
  plain = (q, k, v, bias, arrays)
  sharded = (
    put(q, "q"),
    put(k, "kv"),
    put(v, "kv"),
    put(bias, f"bias_{bias_kind}"),
    dict(
      query_segment_ids=put(arrays["query_segment_ids"], "seg"),
      key_value_segment_ids=put(arrays["key_value_segment_ids"], "seg"),
      key_value_seq_lengths=put(arrays["key_value_seq_lengths"], "lengths"),
    ),
  )
  return plain, sharded


def _fwd(impl, **static):
  def f(q, k, v, bias, arrays):
    return jaxdnn.dot_product_attention(q, k, v, bias, implementation=impl, **static, **arrays)

  return f


def _vjp(impl, **static):
  # A cotangent for the output rather than a scalar loss: no reduction, so any
  # collective in the compiled backward would be the kernel's own.
  def g(q, k, v, bias, arrays, ct):
    f = lambda q, k, v, bias: _fwd(impl, **static)(q, k, v, bias, arrays)
    return jax.vjp(f, q, k, v, bias)[1](ct)

  return g


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_sharded_forward_and_backward(layout):
  mesh, dims, specs, put = _layout(layout)
  plain, sharded = _inputs(dims, put, "full")
  static = dict(is_causal=True, return_logsumexp=True)

  fwd = jax.jit(_fwd(None, **static))
  out, lse = fwd(*sharded)
  want_out, want_lse = jit(_fwd("xla", **static), "xla")(*plain)
  unsharded_out, _ = fwd(*plain)
  assert_close(out, want_out, 2e-5)
  assert_close(out, unsharded_out, 1e-6)
  assert_close(jnp.nan_to_num(lse, neginf=0), jnp.nan_to_num(want_lse, neginf=0), 1e-5)
  assert out.sharding.is_equivalent_to(sharded[0].sharding, 4), out.sharding
  text = fwd.lower(*sharded).compile().as_text()
  assert FWD_TARGET in text
  for move in MOVES + ("all-reduce",):
    assert move not in text, move

  ct = cotangent_like(plain[0])
  ct_sharded = put(ct, "q")
  static.pop("return_logsumexp")
  g = jax.jit(_vjp(None, **static))
  got = g(*sharded, ct_sharded)
  want = jit(_vjp("xla", **static), "xla")(*plain, ct)
  for name, a, b, s in zip(["dq", "dk", "dv", "dbias"], got, want, sharded):
    assert_close(a, b, 1e-4, err_msg=name)
    assert a.sharding.is_equivalent_to(s.sharding, a.ndim), (name, a.sharding)
  text = g.lower(*sharded, ct_sharded).compile().as_text()
  assert BWD_TARGET in text
  for move in MOVES:
    assert move not in text, move
  # MQA split over heads: the one kv head is replicated and its gradient is a
  # sum over the head shards; otherwise nothing is reduced.
  assert ("all-reduce" in text) == _kv_replicated_over_heads(layout)


@pytest.mark.parametrize("layout", ["batch", "batch_heads_gqa4", "heads_mqa"])
def test_sharded_bias_broadcast_over_batch(layout):
  # A (1, N, T, S) bias is replicated along the batch shards; its gradient is
  # their sum: the one collective (an all-reduce) when the batch is split.
  mesh, dims, specs, put = _layout(layout)
  plain, sharded = _inputs(dims, put, "1NTS")
  ct = cotangent_like(plain[0])
  ct_sharded = put(ct, "q")
  g = jax.jit(_vjp(None, softcap=4.0))
  got = g(*sharded, ct_sharded)
  want = jit(_vjp("xla", softcap=4.0), "xla")(*plain, ct)
  for name, a, b in zip(["dq", "dk", "dv", "dbias"], got, want):
    assert_close(a, b, 1e-4, err_msg=name)
  assert got[3].shape == (1, dims.heads, dims.q_len, dims.kv_len)
  text = g.lower(*sharded, ct_sharded).compile().as_text()
  for move in MOVES:
    assert move not in text, move
  assert ("all-reduce" in text) == (
    LAYOUTS[layout][3] is not None or _kv_replicated_over_heads(layout)
  )


@pytest.mark.parametrize("layout", ["heads_gqa2", "batch_heads_gqa4", "heads_mqa"])
def test_sharded_dropout_matches_unsharded(layout):
  mesh, dims, specs, put = _layout(layout)
  plain, sharded = _inputs(dims, put, "full")
  static = dict(dropout_rate=0.3, dropout_rng=key(), is_causal=True)
  fwd = jax.jit(_fwd(None, **static))
  out = fwd(*sharded)
  assert_close(out, fwd(*plain), 1e-6)
  assert_close(out, jit(_fwd("xla", **static), "xla")(*plain), 2e-5)
  ct = cotangent_like(plain[0])
  got = jax.jit(_vjp(None, **static))(*sharded, put(ct, "q"))
  want = jit(_vjp("xla", **static), "xla")(*plain, ct)
  for name, a, b in zip(["dq", "dk", "dv", "dbias"], got, want):
    assert_close(a, b, 1e-4, err_msg=name)


def test_heads_that_cannot_split_still_give_the_right_answer():
  # 2 kv heads over 4 head shards cannot follow the query heads: the rule keeps
  # the heads whole (XLA moves data), but the result must be right.
  mesh = jax.make_mesh((4,), ("model",))
  q = rand((2, 7, 8, 64))
  k, v = (rand((2, 33, 2, 64)) for _ in range(2))
  qs = jax.device_put(q, NamedSharding(mesh, P(None, None, "model", None)))
  f = lambda impl: jax.jit(
    lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
  )
  assert_close(f(None)(qs, k, v), f("xla")(q, k, v), 2e-5)
  ct = cotangent_like(q)
  g = lambda impl: jax.jit(lambda q, k, v: jax.vjp(f(impl), q, k, v)[1](ct))
  for a, b in zip(g(None)(qs, k, v), g("xla")(q, k, v)):
    assert_close(a, b, 1e-4)


def test_sharded_vmap_over_extra_batch_axis():
  # vmap folds its axis into the batch; a sharded vmapped axis stays local.
  mesh = jax.make_mesh((4,), ("data",))
  q = rand((4, 2, 7, 4, 64))
  k, v = (rand((4, 2, 33, 2, 64)) for _ in range(2))
  sh = NamedSharding(mesh, P("data"))
  qs, ks, vs = (jax.device_put(x, sh) for x in (q, k, v))
  f = lambda impl: jax.jit(
    jax.vmap(
      lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
    )
  )
  out = f(None)(qs, ks, vs)
  assert_close(out, f("xla")(q, k, v), 2e-5)
  text = f(None).lower(qs, ks, vs).compile().as_text()
  assert FWD_TARGET in text
  for move in MOVES:
    assert move not in text, move


# ---------------------------------------------------------------- context parallelism


@pytest.mark.parametrize(
  "kw",
  [
    dict(is_causal=True),
    dict(),
    dict(is_causal=True, local_window_size=5),
    dict(is_causal=True, segments=True),
  ],
  ids=["causal", "full", "causal_window", "causal_segments"],
)
def test_context_parallel_matches_unsharded(kw):
  """The sequence split over 4 devices (shard_map), keys/values all-gathered."""
  kw = dict(kw)
  use_segments = kw.pop("segments", False)
  mesh = jax.make_mesh((4,), ("seq",))
  ks = jax.random.split(jax.random.PRNGKey(11), 4)
  b, t, n, kh, d = 2, 64, 4, 2, 32
  q = jax.random.normal(ks[0], (b, t, n, d))
  k = jax.random.normal(ks[1], (b, t, kh, d))
  v = jax.random.normal(ks[2], (b, t, kh, d))
  seg = jnp.sort(jax.random.randint(ks[3], (b, t), 0, 3), axis=1)
  w = jax.random.normal(ks[3], (b, t, n, d))
  seq = NamedSharding(mesh, P(None, "seq"))
  qs, kss, vs, segs, ws = (jax.device_put(x, seq) for x in (q, k, v, seg, w))

  cp, ref = context_parallel_and_whole(mesh, kw, use_segments, implementation="xla")

  assert_close(jax.jit(cp)(qs, kss, vs, segs), ref(q, k, v, seg), 2e-5)
  loss = lambda f, s, w: lambda q, k, v: jnp.sum(f(q, k, v, s) * w)
  got = jax.jit(jax.grad(loss(cp, segs, ws), argnums=(0, 1, 2)))(qs, kss, vs)
  want = jax.grad(loss(ref, seg, w), argnums=(0, 1, 2))(q, k, v)
  for g, r in zip(got, want):
    assert_close(g, r, 1e-4)
  text = jax.jit(cp).lower(qs, kss, vs, segs).compile().as_text()
  assert FWD_TARGET in text


def test_context_parallel_rejects_a_right_window():
  mesh = jax.make_mesh((4,), ("seq",))
  x = jnp.ones((1, 8, 2, 16))
  f = jax.shard_map(
    lambda q: jaxdnn.dot_product_attention_context_parallel(
      q, q, q, axis_name="seq", is_causal=True, local_window_size=(2, 1)
    ),
    mesh=mesh,
    in_specs=P(None, "seq"),
    out_specs=P(None, "seq"),
  )
  with pytest.raises(ValueError, match="left window"):
    jax.jit(f)(jax.device_put(x, NamedSharding(mesh, P(None, "seq"))))
