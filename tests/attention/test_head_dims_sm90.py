"""Head dims 96 and 192 on their own sm90 forward kernels (cpp/attention/sm90/
forward_config.cuh: the 128 and 256 layouts with the gemms over the head
dim's own columns, TMA zero-filling the rest): output and log-sum-exp
against the "xla" oracle with odd lengths, GQA, causal (top-left and
bottom-right), windows, lengths, segment ids and softcap; gradients (head
dims 96 and 192 on their own sm90 backward kernels, a log-sum-exp cotangent
padded); the compiled calls take the unpadded operands.
MLA 192/128 rides on the 192 kernel (test_mla.py). GPU only: on the CPU the
same head dims run through the attention suite's CPU kernel."""

import jax
import jax.numpy as jnp
import pytest
from attention_cases import (
  BWD_TARGET,
  FWD_TARGET,
  OPTIONS,
  Dims,
  assert_close,
  cotangent_like,
  grad_tol,
  grads,
  hlo,
  qkv,
  run,
  tol,
)

import jaxdnn

pytestmark = pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU")

DIMS = [
  Dims(2, 300, 1030, 8, 2, 96),
  Dims(1, 1537, 1537, 4, 4, 96),
  Dims(2, 129, 77, 4, 1, 96),
  Dims(1, 1000, 1000, 4, 2, 192),
  Dims(2, 65, 333, 2, 1, 192),
  Dims(1, 257, 257, 2, 2, 192),
]
FORWARD_OPTIONS = [
  "plain",
  "causal",
  "window_pair",
  "both_lengths",
  "segments",
  "softcap",
  "causal_segments_kvlen",
]
DTYPES = [jnp.bfloat16, jnp.float16]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("option", FORWARD_OPTIONS)
@pytest.mark.parametrize("dims", DIMS, ids=str)
def test_forward_matches_oracle(dims, option, dtype):
  q, k, v = qkv(dims, dtype)
  kw = OPTIONS[option](dims)
  out, lse = run("cuda", q, k, v, return_logsumexp=True, **kw)
  want, want_lse = run("xla", q, k, v, return_logsumexp=True, **kw)
  assert out.shape == q.shape
  assert_close(out, want, tol(dtype))
  assert_close(lse, want_lse, tol(dtype))


GRAD_OPTIONS = ["plain", "causal", "window_pair", "both_lengths", "segments", "softcap"]


@pytest.mark.parametrize("option", GRAD_OPTIONS)
@pytest.mark.parametrize("dims", [DIMS[0], DIMS[2], DIMS[3], DIMS[4], DIMS[5]], ids=str)
def test_gradients_match_oracle(dims, option):
  q, k, v = qkv(dims, jnp.bfloat16)
  kw = OPTIONS[option](dims)
  w = cotangent_like(q)
  got, want = grads("cuda", q, k, v, kw, w), grads("xla", q, k, v, kw, w)
  for label, a, b in zip(["dq", "dk", "dv"], got, want):
    assert a.shape == b.shape, label
    assert_close(a, b, grad_tol(jnp.bfloat16), err_msg=label)


@pytest.mark.parametrize("head_dim", [96, 192])
@pytest.mark.parametrize("option", ["causal", "causal_segments_kvlen"])
def test_float16_gradients(option, head_dim):
  dims = Dims(1, 1537, 1537, 4, 2, head_dim)
  q, k, v = qkv(dims, jnp.float16)
  kw = OPTIONS[option](dims)
  w = cotangent_like(q)
  got, want = grads("cuda", q, k, v, kw, w), grads("xla", q, k, v, kw, w)
  for label, a, b in zip(["dq", "dk", "dv"], got, want):
    assert_close(a, b, grad_tol(jnp.float16), err_msg=label)


@pytest.mark.parametrize("deterministic", [False, True], ids=["unordered", "ordered"])
@pytest.mark.parametrize("option", ["plain", "causal"])
def test_long_query_gradients_at_96(option, deterministic):
  # Long enough for the fused backward (head dim 96 there unless
  # JAXDNN_ATTENTION_SM90_BWD_FUSED_D96=0 keeps the two-kernel one): from 512
  # query rows unordered, 8192 ordered (plan.h's thresholds); GQA 2, odd
  # lengths, bit-identical reruns ordered.
  dims = Dims(1, 8193, 8193, 2, 1, 96) if deterministic else Dims(2, 1100, 1100, 4, 2, 96)
  q, k, v = qkv(dims, jnp.bfloat16)
  kw = dict(OPTIONS[option](dims), deterministic=deterministic)
  w = cotangent_like(q)
  got, want = grads("cuda", q, k, v, kw, w), grads("xla", q, k, v, kw, w)
  for label, a, b in zip(["dq", "dk", "dv"], got, want):
    assert_close(a, b, grad_tol(jnp.bfloat16), err_msg=label)
  if deterministic:
    again = grads("cuda", q, k, v, kw, w)
    for a, b in zip(got, again):
      assert jnp.array_equal(a, b)


def test_lse_gradient_at_96():
  # A log-sum-exp cotangent takes a backward without native 96 (it pads).
  dims = Dims(2, 200, 300, 4, 2, 96)
  q, k, v = qkv(dims, jnp.bfloat16)
  w, w_lse = cotangent_like(q), jnp.ones((2, 200, 4), jnp.float32)
  got = grads("cuda", q, k, v, {}, w, w_lse)
  want = grads("xla", q, k, v, {}, w, w_lse)
  for label, a, b in zip(["dq", "dk", "dv"], got, want):
    assert_close(a, b, grad_tol(jnp.bfloat16), err_msg=label)


@pytest.mark.parametrize("head_dim", [96, 192])
def test_backward_runs_unpadded(head_dim):
  dims = Dims(1, 512, 512, 4, 4, head_dim)
  q, k, v = qkv(dims, jnp.bfloat16)

  def loss(q, k, v):
    out = jaxdnn.dot_product_attention(q, k, v, is_causal=True, implementation="cuda")
    return jnp.sum(out.astype(jnp.float32))

  text = hlo(jax.grad(loss, argnums=(0, 1, 2)), q, k, v)
  assert BWD_TARGET in text
  assert " pad(" not in text, "the backward should take the operands unpadded"


def _forward_hlo(q, k, v, **kw):
  f = lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, implementation="cuda", **kw)
  return hlo(f, q, k, v)


@pytest.mark.parametrize("head_dim", [96, 192])
def test_forward_runs_unpadded(head_dim):
  dims = Dims(1, 512, 512, 4, 4, head_dim)
  q, k, v = qkv(dims, jnp.bfloat16)
  text = _forward_hlo(q, k, v)
  assert FWD_TARGET in text
  assert " pad(" not in text, "the forward should take the operands unpadded"


def test_bias_and_decode_still_pad():
  # The bias kernels and the split-KV decode have no 96 or 192 build: the API pads for them.
  dims = Dims(1, 200, 300, 4, 2, 96)
  q, k, v = qkv(dims, jnp.bfloat16)
  bias = OPTIONS["bias_1NTS"](dims)["bias"].astype(jnp.bfloat16)
  assert " pad(" in _forward_hlo(q, k, v, bias=bias)
  out = run("cuda", q, k, v, bias=bias)
  assert_close(out, run("xla", q, k, v, bias=bias), tol(jnp.bfloat16))
  dims = Dims(2, 1, 4096, 8, 2, 192)
  q, k, v = qkv(dims, jnp.bfloat16)
  assert " pad(" in _forward_hlo(q, k, v)
  assert_close(run("cuda", q, k, v), run("xla", q, k, v), tol(jnp.bfloat16))


def test_empty_keys_pad():
  # No key: the sm90 forward refuses the shape, so the API pads (zeros out).
  q = qkv(Dims(2, 33, 1, 4, 2, 96), jnp.bfloat16)[0]
  k = v = jnp.zeros((2, 0, 2, 96), jnp.bfloat16)
  assert " pad(" in _forward_hlo(q, k, v)
  out = run("cuda", q, k, v)
  assert out.shape == q.shape and not jnp.any(out)  # a row with nothing to attend gives zeros
