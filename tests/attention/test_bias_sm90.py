"""The additive bias on the Hopper kernels (cpp/attention/sm90/forward_bias.cuh,
backward_bias.cuh):
every broadcast of a 16-bit bias over batch, heads and query rows, the three
copy widths its row alignment picks (16 bytes, 4 bytes, element by element),
head dims 64/128/256, GQA, causal (top-left and bottom-right), softcap, query
and key lengths, -inf entries, a float16 bias under bfloat16 activations;
output and log-sum-exp against the "xla" oracle; the backward's dq, dk, dv
and dbias (stored whole, or staged and summed over the broadcast dims) too. GPU only (on the CPU the
same cases run through the attention suite's CPU kernel)."""

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
  qkv,
  run,
  tol,
)

import jaxdnn

pytestmark = pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU")

# (dims, bias broadcast): kv_len 1024 -> 16-byte copies, 1030 -> 4-byte, 1031 -> element-wise.
CASES = {
  "1NTS_d128_aligned": (Dims(2, 300, 1024, 4, 4, 128), "1NTS"),
  "BNTS_d128_even": (Dims(2, 257, 1030, 4, 2, 128), "BNTS"),
  "B1TS_d128_odd": (Dims(2, 129, 1031, 4, 1, 128), "B1TS"),
  "11TS_d64_aligned": (Dims(1, 200, 520, 8, 2, 64), "11TS"),
  "1N1S_d64_odd": (Dims(2, 77, 333, 2, 2, 64), "1N1S"),
  "BNTS_d256_aligned": (Dims(1, 190, 456, 2, 2, 256), "BNTS"),
  "1NTS_d256_odd": (Dims(2, 65, 257, 2, 1, 256), "1NTS"),
  "TS_d128_short": (Dims(1, 1, 17, 2, 2, 128), "TS"),
}
DTYPES = [jnp.bfloat16, jnp.float16]


def _check(dims, bias, dtype, **kw):
  q, k, v = qkv(dims, dtype)
  out, lse = run("cuda", q, k, v, bias=bias, return_logsumexp=True, **kw)
  want, want_lse = run("xla", q, k, v, bias=bias, return_logsumexp=True, **kw)
  assert_close(out, want, tol(dtype))
  assert_close(lse, want_lse, tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", list(CASES))
def test_bias_forward_matches_oracle(name, causal, dtype):
  dims, kind = CASES[name]
  _check(dims, bias_of(dims, kind).astype(dtype), dtype, is_causal=causal)


@pytest.mark.parametrize("name", ["1NTS_d128_aligned", "B1TS_d128_odd", "BNTS_d256_aligned"])
def test_bias_with_softcap_lengths_and_window(name):
  dims, kind = CASES[name]
  bias = bias_of(dims, kind).astype(jnp.bfloat16)
  _check(
    dims,
    bias,
    jnp.bfloat16,
    softcap=20.0,
    query_seq_lengths=lengths(dims.batch, dims.q_len),
    key_value_seq_lengths=lengths(dims.batch, dims.kv_len),
    local_window_size=(100, 3),
  )


def test_float16_bias_under_bfloat16_activations():
  dims, kind = CASES["BNTS_d128_even"]
  _check(dims, bias_of(dims, kind).astype(jnp.float16), jnp.bfloat16, is_causal=True)


def test_minus_infinity_bias_masks_on_the_gpu():
  # -inf entries mask like a boolean mask does (the oracle's own form for a
  # row left with no key, which the bias form turns into NaN).
  dims, kind = CASES["1NTS_d128_aligned"]
  bias = np.asarray(bias_of(dims, kind).astype(jnp.bfloat16), np.float32)
  keep = np.random.default_rng(5).random(bias.shape) >= 0.3
  keep[0, 0, 5, :] = False  # a row with no key left
  q, k, v = qkv(dims, jnp.bfloat16)
  inf_bias = jnp.asarray(np.where(keep, bias, -np.inf), jnp.bfloat16)
  out, lse = run("cuda", q, k, v, bias=inf_bias, return_logsumexp=True)
  want, want_lse = run(
    "xla",
    q,
    k,
    v,
    bias=jnp.asarray(bias, jnp.bfloat16),
    mask=jnp.asarray(keep),
    return_logsumexp=True,
  )
  assert_close(out, want, tol(jnp.bfloat16))
  np.testing.assert_array_equal(np.asarray(out[0, 5, 0], np.float32), 0)
  assert np.isneginf(np.asarray(lse)[0, 5, 0])  # lse: [batch, q_len, heads]
  fin = lambda x: jnp.nan_to_num(x, neginf=0)
  assert_close(fin(lse), fin(want_lse), tol(jnp.bfloat16))


def test_bias_forward_is_a_jaxdnn_custom_call():
  dims, kind = CASES["1NTS_d128_aligned"]
  q, k, v = qkv(dims, jnp.bfloat16)
  bias = bias_of(dims, kind).astype(jnp.bfloat16)
  text = hlo(lambda q, k, v, b: jaxdnn.dot_product_attention(q, k, v, bias=b), q, k, v, bias)
  assert FWD_TARGET in text


GRAD_CASES = [
  "1NTS_d128_aligned",
  "BNTS_d128_even",
  "B1TS_d128_odd",
  "11TS_d64_aligned",
  "1N1S_d64_odd",
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", GRAD_CASES)
def test_bias_gradients_match_oracle(name, causal, dtype):
  dims, kind = CASES[name]
  q, k, v = qkv(dims, dtype)
  kw = dict(bias=bias_of(dims, kind).astype(dtype), is_causal=causal)
  w = cotangent_like(q)
  got = grads("cuda", q, k, v, kw, w)
  want = grads("xla", q, k, v, kw, w)
  for label, a, b in zip(["dq", "dk", "dv", "dbias"], got, want):
    assert a.dtype == b.dtype, label
    assert_close(a, b, grad_tol(dtype), err_msg=label)


@pytest.mark.parametrize(
  "name,with_lengths",
  [
    ("BNTS_d128_even", True),
    ("1NTS_d128_aligned", True),
    ("1NTS_d128_aligned", False),
    ("11TS_d64_aligned", False),
  ],
)
def test_bias_gradients_with_lengths_and_window(name, with_lengths):
  # dbias stored whole, staged (lengths: each batch row walks its own
  # blocks), or chained over batch / heads with a window's skipped blocks.
  dims, kind = CASES[name]
  q, k, v = qkv(dims, jnp.bfloat16)
  kw = dict(bias=bias_of(dims, kind).astype(jnp.bfloat16), local_window_size=(200, 10))
  if with_lengths:
    kw.update(
      query_seq_lengths=lengths(dims.batch, dims.q_len),
      key_value_seq_lengths=lengths(dims.batch, dims.kv_len),
    )
  w = cotangent_like(q)
  got, want = grads("cuda", q, k, v, kw, w), grads("xla", q, k, v, kw, w)
  for label, a, b in zip(["dq", "dk", "dv", "dbias"], got, want):
    assert_close(a, b, grad_tol(jnp.bfloat16), err_msg=label)


def test_bias_backward_is_a_jaxdnn_custom_call():
  dims, kind = CASES["1NTS_d128_aligned"]
  q, k, v = qkv(dims, jnp.bfloat16)
  bias = bias_of(dims, kind).astype(jnp.bfloat16)
  loss = lambda q, k, v, b: jnp.sum(
    jaxdnn.dot_product_attention(q, k, v, bias=b).astype(jnp.float32)
  )
  assert BWD_TARGET in hlo(jax.grad(loss, argnums=(0, 1, 2, 3)), q, k, v, bias)


def test_chained_dbias_is_deterministic():
  # The chained sums add in (batch, head) order: reruns agree bit for bit.
  dims, kind = Dims(3, 256, 512, 4, 2, 128), "11TS"
  q, k, v = qkv(dims, jnp.bfloat16)
  kw = dict(bias=bias_of(dims, kind).astype(jnp.bfloat16), is_causal=True)
  w = cotangent_like(q)
  first = grads("cuda", q, k, v, kw, w)[3]
  for _ in range(3):
    np.testing.assert_array_equal(np.asarray(grads("cuda", q, k, v, kw, w)[3]), np.asarray(first))


def test_lowest_finite_bias_stays_finite():
  # flax's "big negative" padding: bfloat16's lowest finite value. A row of it
  # is uniform over the keys in the reference (scale * q.k + bias stays
  # finite), not masked: the kernels must not overflow it to -inf.
  dims = Dims(2, 130, 256, 4, 4, 128)
  q, k, v = qkv(dims, jnp.bfloat16)
  big_neg = float(jnp.finfo(jnp.bfloat16).min)
  bias = np.array(bias_of(dims, "B1TS"), np.float32)  # a writable copy
  bias[:, :, :, 200:] = big_neg  # padded keys
  bias[1, :, 7, :] = big_neg  # a padded query row
  kw = dict(bias=jnp.asarray(bias, jnp.bfloat16))
  out, lse = run("cuda", q, k, v, return_logsumexp=True, **kw)
  want, want_lse = run("xla", q, k, v, return_logsumexp=True, **kw)
  assert np.all(np.isfinite(np.asarray(lse)))
  assert_close(out, want, tol(jnp.bfloat16))
  assert_close(lse, want_lse, tol(jnp.bfloat16))
  # The padded row's own cotangent is zero, as a model's masked loss makes
  # it: its logits all round to the same float32 value, so the kernels'
  # lse (which absorbs log(keys) there) cannot rebuild its P for a gradient
  # (every kernel, the CPU one too).
  w = np.array(cotangent_like(q))
  w[1, 7] = 0
  w = jnp.asarray(w)
  for label, a, b in zip(
    ["dq", "dk", "dv", "dbias"], grads("cuda", q, k, v, kw, w), grads("xla", q, k, v, kw, w)
  ):
    assert np.all(np.isfinite(np.asarray(a, np.float32))), label
    assert_close(a, b, grad_tol(jnp.bfloat16), err_msg=label)
