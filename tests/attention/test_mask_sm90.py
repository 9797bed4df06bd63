"""Boolean masks on the Hopper bias kernels: the API sends a mask as an
additive 0 / -inf bias where the C++ plan says the sm90 bias forward and
backward take it (plan.h, MaskAsBias: head dims 64/128, no softcap or
dropout), summed into the caller's bias when there is one. Output,
log-sum-exp and gradients against the "xla" oracle for every mask
broadcast, rows left with no key, causal, windows and lengths on top, a mask
with a bias (dbias summed back to the bias's own shape); the compiled
backward writes no dbias for a mask alone; the switch keeps masks on the
mma.sync kernels. GPU only (on the CPU the same cases run through the
attention suite's CPU kernel)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_cases import (
  BWD_TARGET,
  FWD_TARGET,
  Dims,
  assert_close,
  bias_of,
  cotangent_like,
  grad_tol,
  grads,
  hlo,
  lengths,
  mask_of,
  qkv,
  run,
  tol,
)

import jaxdnn

pytestmark = pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU")

# (dims, mask broadcast): odd key counts take the bias stages' narrow copies.
CASES = {
  "B1TS_d128": (Dims(2, 300, 1024, 4, 2, 128), "B1TS"),
  "BNTS_d64_odd": (Dims(2, 129, 1031, 4, 4, 64), "BNTS"),
  "B11S_d128_odd": (Dims(2, 257, 333, 8, 1, 128), "B11S"),
  "B11S_d128_aligned": (Dims(2, 257, 1024, 4, 2, 128), "B11S"),
  "11TS_d64": (Dims(1, 200, 520, 8, 2, 64), "11TS"),
  "TS_d128_short": (Dims(1, 3, 17, 2, 2, 128), "TS"),
}
OPTIONS = {
  "plain": lambda d: {},
  "causal": lambda d: dict(is_causal=True),
  "window": lambda d: dict(local_window_size=(100, 7)),
  "lengths": lambda d: dict(
    query_seq_lengths=lengths(d.batch, d.q_len),
    key_value_seq_lengths=lengths(d.batch, d.kv_len),
  ),
}
DTYPES = [jnp.bfloat16, jnp.float16]


def _mask(dims, kind):
  if kind == "TS":
    return mask_of(dims, "11TS")[0, 0]
  m = np.array(mask_of(dims, kind))
  m[0, 0, min(2, m.shape[2] - 1), :] = False  # a row with no key left
  return jnp.asarray(m)


def _finite(x):
  return jnp.nan_to_num(x, neginf=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("name", list(CASES))
def test_mask_forward_matches_oracle(name, option, dtype):
  dims, kind = CASES[name]
  q, k, v = qkv(dims, dtype)
  kw = dict(mask=_mask(dims, kind), **OPTIONS[option](dims))
  out, lse = run("cuda", q, k, v, return_logsumexp=True, **kw)
  want, want_lse = run("xla", q, k, v, return_logsumexp=True, **kw)
  assert_close(out, want, tol(dtype))
  np.testing.assert_array_equal(np.isneginf(np.asarray(lse)), np.isneginf(np.asarray(want_lse)))
  assert_close(_finite(lse), _finite(want_lse), tol(dtype))


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("name", list(CASES))
def test_mask_gradients_match_oracle(name, option):
  dims, kind = CASES[name]
  q, k, v = qkv(dims, jnp.bfloat16)
  kw = dict(mask=_mask(dims, kind), **OPTIONS[option](dims))
  w = cotangent_like(q)
  got, want = grads("cuda", q, k, v, kw, w), grads("xla", q, k, v, kw, w)
  for label, a, b in zip(["dq", "dk", "dv"], got, want):
    assert_close(a, b, grad_tol(jnp.bfloat16), err_msg=label)


@pytest.mark.parametrize("name", ["B1TS_d128", "BNTS_d64_odd"])
def test_float16_mask_gradients(name):
  dims, kind = CASES[name]
  q, k, v = qkv(dims, jnp.float16)
  kw = dict(mask=_mask(dims, kind), is_causal=True)
  w = cotangent_like(q)
  got, want = grads("cuda", q, k, v, kw, w), grads("xla", q, k, v, kw, w)
  for label, a, b in zip(["dq", "dk", "dv"], got, want):
    assert_close(a, b, grad_tol(jnp.float16), err_msg=label)


def test_mask_with_an_lse_gradient():
  # A log-sum-exp cotangent takes the mma.sync backward, with the bias and no dbias.
  dims, kind = CASES["11TS_d64"]
  q, k, v = qkv(dims, jnp.bfloat16)
  m = np.array(_mask(dims, kind))
  m[0, 0, 5, :] = False
  kw = dict(mask=jnp.asarray(m))
  w, w_lse = cotangent_like(q), cotangent_like(jnp.zeros((dims.batch, dims.q_len, dims.heads)))
  got = grads("cuda", q, k, v, kw, w, w_lse)
  want = grads("xla", q, k, v, kw, w, w_lse)
  for label, a, b in zip(["dq", "dk", "dv"], got, want):
    assert_close(a, b, grad_tol(jnp.bfloat16), err_msg=label)


def test_vmapped_mask_gradients():
  dims, kind = CASES["B11S_d128_odd"]
  q, k, v = qkv(dims, jnp.bfloat16)
  m = _mask(dims, kind)

  def grad_of(impl):
    loss = lambda q, k, v, m: jnp.sum(
      jaxdnn.dot_product_attention(
        q[None], k[None], v[None], mask=m[None], implementation=impl
      ).astype(jnp.float32)
      ** 2
    )
    return jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2))))(q, k, v, m)

  for label, a, b in zip(["dq", "dk", "dv"], grad_of("cuda"), grad_of("xla")):
    assert_close(a, b, grad_tol(jnp.bfloat16), err_msg=label)


def test_eager_mask_under_debug_infs():
  # The 0 / -inf bias is -inf by design: an eager call must not stop on it.
  dims, kind = CASES["B1TS_d128"]
  q, k, v = qkv(dims, jnp.bfloat16)
  m = _mask(dims, kind)
  with jax.debug_infs(True):
    out = jaxdnn.dot_product_attention(q, k, v, mask=m)
  assert_close(out, run("xla", q, k, v, mask=m), tol(jnp.bfloat16))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
  "bias_kind,mask_kind", [("1NTS", "B1TS"), ("BNTS", "11TS"), ("1N1S", "B11S")]
)
def test_mask_with_bias(bias_kind, mask_kind, causal):
  # The sum's dbias goes back to the bias's own shape; masked pairs add nothing.
  dims = Dims(2, 190, 456, 4, 2, 128)
  q, k, v = qkv(dims, jnp.bfloat16)
  kw = dict(
    bias=bias_of(dims, bias_kind).astype(jnp.bfloat16),
    mask=_mask(dims, mask_kind),
    is_causal=causal,
  )
  out = run("cuda", q, k, v, **kw)
  assert_close(out, run("xla", q, k, v, **kw), tol(jnp.bfloat16))
  w = cotangent_like(q)
  got, want = grads("cuda", q, k, v, kw, w), grads("xla", q, k, v, kw, w)
  for label, a, b in zip(["dq", "dk", "dv", "dbias"], got, want):
    assert a.shape == b.shape, label
    assert_close(a, b, grad_tol(jnp.bfloat16), err_msg=label)


def _mask_loss(q, k, v, m):
  return jnp.sum(jaxdnn.dot_product_attention(q, k, v, mask=m).astype(jnp.float32))


def test_mask_runs_as_a_bias_without_dbias():
  dims, kind = CASES["B1TS_d128"]
  q, k, v = qkv(dims, jnp.bfloat16)
  m = _mask(dims, kind)
  fwd = hlo(lambda q, k, v, m: jaxdnn.dot_product_attention(q, k, v, mask=m), q, k, v, m)
  assert FWD_TARGET in fwd
  text = hlo(jax.grad(_mask_loss, argnums=(0, 1, 2)), q, k, v, m)
  assert BWD_TARGET in text
  # The backward's custom call returns dq, dk, dv and its workspace: no float32 dbias.
  call = next(line for line in text.splitlines() if BWD_TARGET in line and "custom-call(" in line)
  assert "f32[2,1,300,1024]" not in call, call


def test_switch_keeps_masks_on_mma_sync(monkeypatch):
  # JAXDNN_ATTENTION_SM90_MASK_AS_BIAS=0: the plan says no, the mask goes
  # to the kernels as it is (read per query at trace time).
  from jaxdnn import _extension

  real = _extension.plan_query
  monkeypatch.setattr(
    _extension,
    "plan_query",
    lambda name, **a: 0 if name == "attention_mask_as_bias" else real(name, **a),
  )
  dims, kind = CASES["BNTS_d64_odd"]
  q, k, v = qkv(dims, jnp.bfloat16)
  m = _mask(dims, kind)
  out = run("cuda", q, k, v, mask=m, is_causal=True)
  assert_close(out, run("xla", q, k, v, mask=m, is_causal=True), tol(jnp.bfloat16))
