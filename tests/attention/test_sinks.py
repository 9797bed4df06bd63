"""Attention sinks (`sinks`: a logit per query head in every row's softmax
denominator) against the "xla" oracle, whose own formula is checked against a
float64 numpy one; gradients with respect to the sinks included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_cases import (
  FWD_TARGET,
  SHAPES,
  Dims,
  assert_close,
  cotangent_like,
  grad_tol,
  hlo,
  qkv,
  rand,
  segment_ids,
  tol,
)
from jax.test_util import check_grads

import jaxdnn

ON_GPU = jax.default_backend() == "gpu"
KERNELS = [None] + ([] if ON_GPU else ["cpu"])
DTYPES = [jnp.float32] if not ON_GPU else [jnp.bfloat16, jnp.float16]


def _options(d: Dims):
  lengths = np.array([0] + [d.kv_len] * (d.batch - 1), np.int32)  # batch 0: no key at all
  return {
    "plain": {},
    "causal": dict(is_causal=True),
    "window": dict(is_causal=True, local_window_size=(3, 0)),
    "lengths": dict(key_value_seq_lengths=jnp.asarray(lengths)),
    "segments": dict(
      query_segment_ids=segment_ids(d.batch, d.q_len),
      key_value_segment_ids=segment_ids(d.batch, d.kv_len),
    ),
    "bias_mask": dict(
      bias=rand((1, d.heads, d.q_len, d.kv_len)),
      mask=jnp.asarray(np.random.default_rng(1).random((d.batch, 1, d.q_len, d.kv_len)) < 0.7),
    ),
  }


def _attend(impl, q, k, v, sinks, kw, lse=True):
  f = lambda q, k, v, s, arrays: jaxdnn.dot_product_attention(
    q, k, v, sinks=s, implementation=impl, return_logsumexp=lse, **arrays, **static
  )
  arrays = {n: x for n, x in kw.items() if isinstance(x, jax.Array)}
  static = {n: x for n, x in kw.items() if n not in arrays}
  return jax.jit(f)(q, k, v, sinks, arrays)


def _sinks(heads):
  return rand((heads,), jnp.float32, scale=2.0)


@pytest.mark.parametrize("impl", KERNELS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("dims", [SHAPES[2], SHAPES[4], SHAPES[6]], ids=str)
@pytest.mark.parametrize(
  "option", ["plain", "causal", "window", "lengths", "segments", "bias_mask"]
)
def test_sinks_forward_matches_the_oracle(impl, dtype, dims, option):
  q, k, v = qkv(dims, dtype)
  kw = _options(dims)[option]
  s = _sinks(dims.heads)
  out, lse = _attend(impl, q, k, v, s, kw)
  want_out, want_lse = _attend("xla", q, k, v, s, kw)
  assert_close(out, want_out, tol(dtype))
  assert_close(lse, want_lse, tol(jnp.float32) if dtype == jnp.float32 else 1e-2)


def test_the_oracle_matches_float64_numpy():
  d = Dims(2, 7, 9, 4, 2, 16)
  q, k, v = qkv(d)
  s = _sinks(d.heads)
  out, lse = _attend("xla", q, k, v, s, {})
  qq, kk, vv = (np.asarray(x, np.float64) for x in (q, k, v))
  kk, vv = np.repeat(kk, 2, axis=2), np.repeat(vv, 2, axis=2)
  logits = np.einsum("btnd,bsnd->bnts", qq, kk) / np.sqrt(d.head_dim)
  sink = np.asarray(s, np.float64)[None, :, None, None]
  m = np.maximum(logits.max(-1, keepdims=True), sink)
  e, es = np.exp(logits - m), np.exp(sink - m)
  total = e.sum(-1, keepdims=True) + es
  want = np.einsum("bnts,bsnd->btnd", e / total, vv)
  np.testing.assert_allclose(np.asarray(out), want, atol=2e-6)
  np.testing.assert_allclose(
    np.asarray(lse), np.swapaxes((m + np.log(total))[..., 0], 1, 2), atol=2e-6
  )


def test_a_row_with_no_key_gives_zeros_and_the_sink_as_lse():
  d = Dims(2, 5, 6, 4, 4, 16)
  q, k, v = qkv(d)
  s = _sinks(d.heads)
  kw = dict(key_value_seq_lengths=jnp.asarray([0, 6], jnp.int32))
  for impl in KERNELS + ["xla"]:
    out, lse = _attend(impl, q, k, v, s, kw)
    assert np.all(np.asarray(out[0]) == 0)
    np.testing.assert_allclose(np.asarray(lse[0]), np.broadcast_to(np.asarray(s), (5, 4)))


@pytest.mark.parametrize("impl", KERNELS, ids=str)
@pytest.mark.parametrize("option", ["plain", "causal", "lengths", "bias_mask"])
def test_sinks_gradients_match_the_oracle(impl, option):
  dtype = DTYPES[0]
  d = SHAPES[2]
  q, k, v = qkv(d, dtype)
  kw = _options(d)[option]
  s = _sinks(d.heads)
  w_out = cotangent_like(q)
  w_lse = rand((d.batch, d.q_len, d.heads))

  def grads(impl):
    def loss(q, k, v, s):
      out, lse = _attend(impl, q, k, v, s, kw)
      finite_lse = jnp.where(jnp.isfinite(lse), lse, 0.0)
      return jnp.sum(out.astype(jnp.float32) * w_out) + jnp.sum(finite_lse * w_lse)

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(q, k, v, s)

  for got, want, name in zip(grads(impl), grads("xla"), "qkvs"):
    assert_close(got, want, grad_tol(dtype), err_msg=name)


@pytest.mark.skipif(ON_GPU, reason="float32 check_grads on the CPU kernel")
def test_check_grads_in_float32():
  d = Dims(1, 5, 6, 2, 1, 8)
  q, k, v = qkv(d)
  s = _sinks(d.heads)

  def f(q, s):
    return jaxdnn.dot_product_attention(q, k, v, sinks=s, is_causal=True, implementation="cpu")

  check_grads(f, (q, s), order=1, modes=["rev"], atol=1e-2, rtol=1e-2, eps=1e-3)


def test_vmap_and_the_kernel_in_the_hlo():
  d = Dims(2, 7, 9, 4, 2, 16)
  q, k, v = qkv(d, DTYPES[0])
  s = jnp.stack([_sinks(d.heads), _sinks(d.heads)])

  def f(s):
    return jaxdnn.dot_product_attention(q, k, v, sinks=s)

  got = jax.vmap(f)(s)
  for i in range(2):
    want = jaxdnn.dot_product_attention(q, k, v, sinks=s[i], implementation="xla")
    assert_close(got[i], want, tol(DTYPES[0]))
  assert FWD_TARGET in hlo(f, s[0])


@pytest.mark.parametrize(
  "sinks, error, match",
  [
    (np.zeros(3, np.float32), ValueError, r"sinks must have shape \(4,\)"),
    (np.zeros((1, 4), np.float32), ValueError, "one logit per query head"),
    (np.zeros(4, np.int32), TypeError, "sinks must be a float array"),
    ("zero", TypeError, "sinks must be an array"),
  ],
)
def test_bad_sinks_are_named(sinks, error, match):
  q, k, v = qkv(Dims(1, 3, 3, 4, 2, 8))
  with pytest.raises(error, match=match):
    jaxdnn.dot_product_attention(q, k, v, sinks=sinks)
