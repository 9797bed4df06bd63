"""dot_product_attention against the "xla" oracle (and jax.nn): options, masks,
dropout, numerics, transformations and GPU shapes beyond the conformance checks
(test_conformance.py)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_cases import (
  BWD_TARGET,
  DTYPES,
  FWD_TARGET,
  OPTIONS,
  SHAPES,
  Dims,
  assert_close,
  attention_fn,
  bernoulli,
  bias_of,
  cotangent_like,
  dtype_name,
  grad_tol,
  grads,
  hlo,
  jit,
  key,
  lengths,
  loss_fn,
  mask_of,
  qkv,
  rand,
  run,
  segment_ids,
  split_kwargs,
  tol,
)
from conftest import on_gpu, requires_cpu_backend, requires_gpu
from jax.test_util import check_grads

import jaxdnn
from jaxdnn import _extension
from jaxdnn.attention import dropout as dropout_bits

# On a GPU machine None runs the CUDA kernel (bf16/f16) or the XLA path; the
# CPU kernel's own tests run on CPU machines (CI).
KERNELS = [None] if on_gpu() else [None, "cpu"]

# Self attention with GQA, and cross attention both ways.
OPTION_DIMS = [Dims(2, 33, 33, 4, 2, 64), Dims(2, 7, 33, 4, 1, 40), Dims(2, 33, 7, 2, 2, 96)]


def _fwd_check(impl, dims, dtype, kw, lse=True):
  q, k, v = qkv(dims, dtype)
  got = run(impl, q, k, v, return_logsumexp=lse, **kw)
  want = run("xla", q, k, v, return_logsumexp=lse, **kw)
  if lse:
    (got, got_lse), (want, want_lse) = got, want
    assert got_lse.dtype == want_lse.dtype == jnp.float32
    assert got_lse.shape == (dims.batch, dims.q_len, dims.heads)
    np.testing.assert_array_equal(np.isneginf(got_lse), np.isneginf(want_lse))
    assert not np.any(np.isnan(got_lse))
    finite = jnp.isfinite(want_lse)
    assert_close(
      jnp.where(finite, got_lse, 0.0),
      jnp.where(finite, want_lse, 0.0),
      1e-5 if dtype == jnp.float32 else 1e-2,
    )
  assert got.dtype == want.dtype == jnp.dtype(dtype)
  assert got.shape == q.shape
  assert_close(got, want, tol(dtype))
  return q, k, v


def _grad_check(impl, q, k, v, kw, with_lse=False):
  w_out = cotangent_like(q)
  w_lse = rand(q.shape[:3]) if with_lse else None
  got = grads(impl, q, k, v, kw, w_out, w_lse)
  want = grads("xla", q, k, v, kw, w_out, w_lse)
  names = ["dq", "dk", "dv", "dbias"]
  for n, g, w in zip(names, got, want):
    assert g.shape == w.shape and g.dtype == w.dtype, n
    assert np.all(np.isfinite(np.asarray(g, np.float32))), n
    assert_close(g, w, grad_tol(q.dtype), err_msg=n)


# ---------------------------------------------------------------- shapes and dtypes


@requires_cpu_backend
@pytest.mark.parametrize("dims", SHAPES, ids=str)
def test_forward_shapes_explicit_cpu_causal(dims):
  _fwd_check("cpu", dims, jnp.float32, dict(is_causal=True))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("dims", [SHAPES[i] for i in (0, 2, 4, 5, 7, 9, 11)], ids=str)
def test_gradient_shapes(dims, dtype):
  q, k, v = qkv(dims, dtype)
  _grad_check(None, q, k, v, dict(is_causal=dims.q_len == dims.kv_len))


# ---------------------------------------------------------------- options

_EDGE_OPTIONS = [
  "causal",
  "window_pair",
  "causal_window",
  "both_lengths",
  "segments",
  "bias_B1TS",
  "mask_full",
  "causal_segments_kvlen",
  "everything",
]


@pytest.mark.parametrize("dims", OPTION_DIMS, ids=str)
@pytest.mark.parametrize("option", list(OPTIONS))
def test_option_forward_and_grad(option, dims):
  _option_case(option, dims)


# Decode (q_len 1), a long self attention with MQA, a single key.
@pytest.mark.parametrize(
  "dims",
  [Dims(2, 1, 100, 4, 4, 64), Dims(1, 100, 100, 8, 1, 64), Dims(2, 7, 1, 2, 1, 128)],
  ids=str,
)
@pytest.mark.parametrize("option", _EDGE_OPTIONS)
def test_option_edge_lengths(option, dims):
  _option_case(option, dims)


# Long enough, with few enough heads, that the CPU kernel splits the queries
# (forward) and the keys (backward, dQ parts added after) over several items;
# head dim 40 takes the tile loops' ragged tails, 300 vs 333 bottom-right.
@requires_cpu_backend
@pytest.mark.parametrize(
  "dims",
  [Dims(1, 300, 300, 4, 1, 64), Dims(1, 520, 520, 2, 1, 40), Dims(1, 300, 333, 2, 2, 64)],
  ids=str,
)
@pytest.mark.parametrize(
  "option",
  [
    "plain",
    "causal",
    "window_pair",
    "both_lengths",
    "segments",
    "mask_full",
    "softcap",
    "causal_segments_kvlen",
    "dropout",
  ],
)
def test_cpu_split_sequences(option, dims):
  kw = dict(dropout_rate=0.25, dropout_rng=key()) if option == "dropout" else OPTIONS[option](dims)
  q, k, v = _fwd_check("cpu", dims, jnp.float32, kw)
  _grad_check("cpu", q, k, v, kw)


def _option_case(option, dims):
  kw = OPTIONS[option](dims)
  impl = KERNELS[list(OPTIONS).index(option) % len(KERNELS)]  # both entry points, alternately
  q, k, v = _fwd_check(impl, dims, jnp.float32, kw)
  _grad_check(impl, q, k, v, kw)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=dtype_name)
@pytest.mark.parametrize(
  "option",
  [
    "causal",
    "window_pair",
    "both_lengths",
    "segments",
    "bias_B1TS",
    "mask_full",
    "softcap",
    "everything",
  ],
)
def test_option_low_precision(option, dtype):
  dims = OPTION_DIMS[0]
  kw = OPTIONS[option](dims)
  if "bias" in kw:
    kw["bias"] = kw["bias"].astype(dtype)
  q, k, v = _fwd_check(None, dims, dtype, kw)
  _grad_check(None, q, k, v, kw)


def test_bias_dtype_may_differ_from_query():
  # A float32 bias with bfloat16 activations: dbias comes back in the bias's dtype.
  dims = Dims(2, 7, 33, 4, 2, 64)
  q, k, v = qkv(dims, jnp.bfloat16)
  kw = dict(bias=bias_of(dims, "1NTS"))
  _fwd_check(None, dims, jnp.bfloat16, kw)
  _grad_check(None, q, k, v, kw)


# ---------------------------------------------------------------- mask semantics


def _expand_kv(x, heads):
  return jnp.repeat(x, heads // x.shape[2], axis=2)


def test_causal_self_attention_is_top_left():
  dims = Dims(2, 33, 33, 4, 2, 64)
  q, k, v = qkv(dims)
  out = run(None, q, k, v, is_causal=True)
  # Row 0 sees key 0 only; row i sees keys 0..i.
  assert_close(out[:, 0], _expand_kv(v, 4)[:, 0], 1e-5)
  trunc = run(None, q[:, 10:11], k[:, :11], v[:, :11])
  assert_close(out[:, 10:11], trunc, 2e-5)
  assert_close(out, run("xla", q, k, v, is_causal=True), 2e-5)


@pytest.mark.parametrize("q_len", [1, 7])
def test_causal_cross_attention_is_bottom_right(q_len):
  dims = Dims(2, q_len, 33, 4, 1, 64)
  q, k, v = qkv(dims)
  out = run(None, q, k, v, is_causal=True)
  if q_len == 1:
    # A decode step: the last key is visible, so causal == no mask at all.
    assert_close(out, run(None, q, k, v), 2e-5)
    assert_close(out, run("xla", q, k, v), 2e-5)
  # The query rows are the last q_len rows of a 33 x 33 causal self attention.
  q_full = jnp.concatenate([rand((2, 33 - q_len, 4, 64)), q], axis=1)
  full = run(None, q_full, k, v, is_causal=True)
  assert_close(out, full[:, -q_len:], 2e-5)
  # The first query row sees keys 0 .. 33 - q_len and not the next one.
  assert_close(out[:, :1], run(None, q[:, :1], k[:, : 34 - q_len], v[:, : 34 - q_len]), 2e-5)


@pytest.mark.parametrize(
  "dims", [Dims(2, 33, 33, 4, 2, 64), Dims(1, 7, 33, 2, 1, 64), Dims(1, 33, 7, 2, 2, 64)], ids=str
)
@pytest.mark.parametrize(
  "window,causal", [(5, False), ((3, 0), False), ((0, 4), False), ((2, 9), True)]
)
def test_window_equals_explicit_band_mask(dims, window, causal):
  q, k, v = qkv(dims)
  left, right = (window, window) if isinstance(window, int) else window
  i = np.arange(dims.q_len)[:, None] + max(dims.kv_len - dims.q_len, 0)
  j = np.arange(dims.kv_len)[None, :]
  band = (j >= i - left) & (j <= i + right)
  if causal:
    band &= j <= i
  got = run(None, q, k, v, local_window_size=window, is_causal=causal)
  want = run(None, q, k, v, mask=jnp.asarray(band)[None, None])
  assert_close(got, want, 2e-5)


def test_padded_query_rows_are_zero():
  dims = Dims(3, 33, 33, 4, 2, 64)
  q, k, v = qkv(dims)
  ql = jnp.array([33, 5, 0], jnp.int32)
  out, lse = run(None, q, k, v, query_seq_lengths=ql, is_causal=True, return_logsumexp=True)
  np.testing.assert_array_equal(np.asarray(out[1, 5:]), 0)
  np.testing.assert_array_equal(np.asarray(out[2]), 0)
  assert np.all(np.isneginf(lse[1, 5:])) and np.all(np.isneginf(lse[2]))
  assert np.all(np.abs(np.asarray(out[1, :5])) > 0)
  # The valid rows are unaffected by the padding (top-left causal: row i sees keys 0..i).
  assert_close(out[1, :5], run(None, q[1:2, :5], k[1:2, :5], v[1:2, :5], is_causal=True)[0], 2e-5)
  dq, dk, dv = grads(None, q, k, v, dict(query_seq_lengths=ql, is_causal=True), cotangent_like(q))
  np.testing.assert_array_equal(np.asarray(dq[1, 5:]), 0)
  np.testing.assert_array_equal(np.asarray(dk[2]), 0)
  np.testing.assert_array_equal(np.asarray(dv[2]), 0)


def _fully_masked_cases(d):
  """(kwargs, bool [B, T] rows with no key) for a few ways of masking every key of a row."""
  b, t, s = d.batch, d.q_len, d.kv_len
  mask = np.ones((b, 1, t, s), bool)
  mask[0, 0, 3] = False
  mask[1, 0, 10:12] = False
  rows_mask = np.zeros((b, t), bool)
  rows_mask[0, 3] = rows_mask[1, 10] = rows_mask[1, 11] = True
  # Query segment 9 has no key.
  qs = np.zeros((b, t), np.int32)
  qs[:, 20:] = 1
  qs[1, 30:] = 9
  ks = np.zeros((b, s), np.int32)
  ks[:, 15:] = 1
  rows_seg = qs == 9
  # kv_len 0 for row 1; a window that falls past the valid keys for row 0.
  kvl = np.array([5, 0], np.int32)
  rows_len = np.zeros((b, t), bool)
  rows_len[1] = True
  rows_len[0, 7:] = True  # window (2, 0): rows i >= 7 need keys >= i - 2 >= kv_len 5
  return {
    "mask": (dict(mask=jnp.asarray(mask), bias=bias_of(d, "1NTS")), rows_mask),
    "segments": (
      dict(
        query_segment_ids=jnp.asarray(qs), key_value_segment_ids=jnp.asarray(ks), is_causal=True
      ),
      rows_seg,
    ),
    "lengths_window": (
      dict(key_value_seq_lengths=jnp.asarray(kvl), local_window_size=(2, 0)),
      rows_len,
    ),
  }


@pytest.mark.parametrize("case", ["mask", "segments", "lengths_window"])
@pytest.mark.parametrize("impl", KERNELS, ids=str)
def test_fully_masked_rows_give_zeros(case, impl):
  dims = Dims(2, 33, 33, 4, 2, 64)
  kw, rows = _fully_masked_cases(dims)[case]
  q, k, v = qkv(dims)
  out, lse = run(impl, q, k, v, return_logsumexp=True, **kw)
  rows_b = np.broadcast_to(rows[:, :, None], lse.shape)
  np.testing.assert_array_equal(np.asarray(out)[rows], 0)
  np.testing.assert_array_equal(np.isneginf(np.asarray(lse)), rows_b)
  assert np.all(np.any(np.asarray(out)[~rows] != 0, axis=-1))
  _fwd_check(impl, dims, jnp.float32, kw)  # fresh inputs, same masks
  q, k, v = qkv(dims)
  _grad_check(impl, q, k, v, kw, with_lse=True)
  dq = grads(impl, q, k, v, kw, cotangent_like(q), rand(q.shape[:3]))[0]
  np.testing.assert_array_equal(np.asarray(dq)[rows], 0)


def test_segments_equal_separate_documents():
  # Two packed documents per row == each document on its own.
  dims = Dims(2, 40, 40, 4, 2, 64)
  q, k, v = qkv(dims)
  cut = 17
  seg = jnp.asarray(np.repeat([[0] * cut + [1] * (40 - cut)], 2, axis=0).astype(np.int32))
  kw = dict(query_segment_ids=seg, key_value_segment_ids=seg, is_causal=True)
  out = run(None, q, k, v, **kw)
  a = run(None, q[:, :cut], k[:, :cut], v[:, :cut], is_causal=True)
  b = run(None, q[:, cut:], k[:, cut:], v[:, cut:], is_causal=True)
  assert_close(out, jnp.concatenate([a, b], axis=1), 2e-5)


# ---------------------------------------------------------------- log-sum-exp


@pytest.mark.parametrize(
  "option", ["plain", "causal", "bias_B1TS", "softcap", "both_lengths", "segments", "everything"]
)
@pytest.mark.parametrize("impl", KERNELS, ids=str)
def test_logsumexp_equals_logits_logsumexp(option, impl):
  dims = Dims(2, 7, 33, 4, 2, 64)
  kw = OPTIONS[option](dims)
  q, k, v = qkv(dims)
  _, lse = run(impl, q, k, v, return_logsumexp=True, **kw)
  # The logits and their mask, written out here (not taken from reference.py).
  scale = kw.get("scale", 1 / np.sqrt(64))
  kx = _expand_kv(k, 4)
  logits = jnp.einsum("btnd,bsnd->bnts", q, kx, precision="highest") * scale
  if kw.get("softcap"):
    logits = kw["softcap"] * jnp.tanh(logits / kw["softcap"])
  if "bias" in kw:
    logits = logits + jnp.reshape(kw["bias"], (1,) * (4 - kw["bias"].ndim) + kw["bias"].shape)
  ql = kw.get("query_seq_lengths", jnp.full((2,), 7))[:, None, None, None]
  kl = kw.get("key_value_seq_lengths", jnp.full((2,), 33))[:, None, None, None]
  i = jnp.arange(7)[:, None]
  j = jnp.arange(33)[None, :]
  diag = i + jnp.maximum(kl - ql, 0)
  ok = (i < ql) & (j < kl)
  if kw.get("is_causal"):
    ok &= j <= diag
  if "local_window_size" in kw:
    left, right = kw["local_window_size"]
    ok &= (j >= diag - left) & (j <= diag + right)
  if "query_segment_ids" in kw:
    ok &= (kw["query_segment_ids"][:, :, None] == kw["key_value_segment_ids"][:, None, :])[:, None]
  if "mask" in kw:
    ok &= kw["mask"]
  want = jax.nn.logsumexp(jnp.where(ok, logits, -jnp.inf), axis=-1)  # [B, N, T]
  want = jnp.swapaxes(want, 1, 2)
  np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(want))
  fin = np.isfinite(np.asarray(want))
  np.testing.assert_allclose(np.asarray(lse)[fin], np.asarray(want)[fin], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
  "option", ["plain", "causal", "bias_1NTS", "q_lengths", "segments", "softcap", "everything"]
)
@pytest.mark.parametrize("dims", OPTION_DIMS[:2], ids=str)
def test_logsumexp_gradient(option, dims):
  kw = OPTIONS[option](dims)
  q, k, v = qkv(dims)
  _grad_check(None, q, k, v, kw, with_lse=True)


def test_gradient_through_logsumexp_only():
  dims = Dims(2, 7, 33, 4, 2, 64)
  q, k, v = qkv(dims)
  bias = bias_of(dims, "B1TS")
  w = rand((2, 7, 4))

  def f(impl):
    def loss(q, k, bias):
      _, lse = jaxdnn.dot_product_attention(
        q, k, v, bias, return_logsumexp=True, implementation=impl, is_causal=True
      )
      return jnp.sum(lse * w)

    return jit(jax.grad(loss, argnums=(0, 1, 2)), impl)

  for g, want in zip(f(None)(q, k, bias), f("xla")(q, k, bias)):
    assert_close(g, want, 1e-4)


# ---------------------------------------------------------------- dropout

DROP_DIMS = Dims(2, 33, 33, 4, 2, 64)


def test_dropout_same_rng_same_result_different_rng_different():
  q, k, v = qkv(DROP_DIMS)
  rng = key()
  a = run(None, q, k, v, dropout_rate=0.3, dropout_rng=rng)
  b = run(None, q, k, v, dropout_rate=0.3, dropout_rng=rng)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  c = run(None, q, k, v, dropout_rate=0.3, dropout_rng=key())
  assert np.mean(np.asarray(a) != np.asarray(c)) > 0.5
  plain = run(None, q, k, v)
  assert np.mean(np.asarray(a) != np.asarray(plain)) > 0.5


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.7])
@pytest.mark.parametrize("impl", KERNELS, ids=str)
def test_dropout_fraction_and_pattern(rate, impl):
  # With value = identity, out[.., i, h, j] = P[h, i, j] * keep / (1 - rate):
  # the kept pattern and its scaling can be read off exactly.
  dims = Dims(2, 64, 64, 4, 1, 64)
  q, k, _ = qkv(dims)
  v = jnp.broadcast_to(jnp.eye(64)[None, :, None, :], (2, 64, 1, 64))
  rng = key()
  dropped = run(impl, q, k, v, dropout_rate=rate, dropout_rng=rng)
  probs = run(impl, q, k, v)
  ratio = np.asarray(dropped) / np.asarray(probs)  # [B, T, N, S]
  kept = ratio > 0
  np.testing.assert_allclose(ratio[kept], 1 / (1 - rate), rtol=1e-4)
  np.testing.assert_array_equal(ratio[~kept], 0)
  n = kept.size
  assert abs((1 - kept.mean()) - rate) < 5 * np.sqrt(rate * (1 - rate) / n), kept.mean()
  # The very bits of dropout.py (the oracle's): same key -> same entries dropped.
  seeds = dropout_bits.seeds_from_rng(rng, 2)
  want = np.asarray(dropout_bits.keep_mask(seeds, 4, 64, 64, rate))  # [B, N, T, S]
  np.testing.assert_array_equal(kept, want.transpose(0, 2, 1, 3))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("extra", ["plain", "causal_bias", "segments_lengths"])
def test_dropout_matches_oracle(extra, dtype):
  dims = DROP_DIMS
  kw = dict(dropout_rate=0.25, dropout_rng=key())
  if extra == "causal_bias":
    kw.update(is_causal=True, bias=bias_of(dims, "1NTS").astype(dtype))
  elif extra == "segments_lengths":
    kw.update(OPTIONS["causal_segments_kvlen"](dims))
  q, k, v = _fwd_check(None, dims, dtype, kw)
  _grad_check(None, q, k, v, kw, with_lse=extra == "plain")


def test_dropout_unbatched_and_vmapped_match_oracle():
  dims = Dims(3, 7, 33, 4, 2, 64)
  q, k, v = qkv(dims)
  rng = key()
  f = lambda impl: jit(
    jax.vmap(
      lambda q, k, v: jaxdnn.dot_product_attention(
        q, k, v, dropout_rate=0.5, dropout_rng=rng, implementation=impl
      )
    ),
    impl,
  )
  assert_close(f(None)(q, k, v), f("xla")(q, k, v), 2e-5)
  one = run(None, q[0], k[0], v[0], dropout_rate=0.5, dropout_rng=rng)
  assert_close(one, run("xla", q[0], k[0], v[0], dropout_rate=0.5, dropout_rng=rng), 2e-5)


def test_dropout_per_example_rng_under_vmap():
  # vmap over the dropout key too: every example draws its own bits.
  dims = Dims(2, 7, 33, 4, 2, 64)
  q, k, v = qkv(dims)
  qs = rand((3,) + q.shape)
  rngs = jax.random.split(key(), 3)

  def f(impl):
    return jit(
      jax.vmap(
        lambda q, r: jaxdnn.dot_product_attention(
          q, k, v, dropout_rate=0.4, dropout_rng=r, is_causal=True, implementation=impl
        )
      ),
      impl,
    )

  got = f(None)(qs, rngs)
  assert_close(got, f("xla")(qs, rngs), 2e-5)
  np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(f(None)(qs[::-1], rngs[::-1])[2]))
  assert np.mean(np.asarray(got[0]) != np.asarray(f(None)(qs, rngs[jnp.array([1, 1, 1])])[0])) > 0.5


def test_dropout_legacy_uint32_key_and_deterministic_flag():
  dims = Dims(2, 7, 33, 4, 2, 64)
  q, k, v = qkv(dims)
  kw = dict(
    dropout_rate=0.2, dropout_rng=jax.random.PRNGKey(np.random.randint(1 << 20)), deterministic=True
  )
  q, k, v = _fwd_check(None, dims, jnp.float32, kw)
  _grad_check(None, q, k, v, kw)


# ---------------------------------------------------------------- numerics


@pytest.mark.parametrize("impl", KERNELS, ids=str)
def test_large_logits_are_stable(impl):
  # Logits in the hundreds: the online softmax must rescale, never overflow.
  dims = Dims(2, 33, 100, 4, 2, 64)
  q, k, v = qkv(dims, scale=6.0)
  kw = dict(bias=bias_of(dims, "1NTS") * 50, is_causal=True)
  out, lse = run(impl, q, k, v, return_logsumexp=True, **kw)
  assert np.all(np.isfinite(np.asarray(out))) and np.all(np.isfinite(np.asarray(lse)))
  assert float(jnp.max(lse)) > 100
  _fwd_check(impl, dims, jnp.float32, kw)
  q, k, v = qkv(dims, scale=6.0)
  w = cotangent_like(q)
  for a, b in zip(grads(impl, q, k, v, kw, w), grads("xla", q, k, v, kw, w)):
    assert np.all(np.isfinite(np.asarray(a)))
    assert_close(a, b, 1e-3)


@pytest.mark.parametrize("impl", KERNELS, ids=str)
def test_minus_infinity_bias_masks(impl):
  # -inf in the bias masks like the mask does; a row of -inf is a fully masked row.
  dims = Dims(2, 7, 33, 4, 2, 64)
  q, k, v = qkv(dims)
  mask = np.array(mask_of(dims, "B1TS", 0.7))
  mask[1, 0, 4] = False
  bias = np.asarray(bias_of(dims, "B1TS"))
  inf_bias = jnp.asarray(np.where(mask, bias, -np.inf))
  out, lse = run(impl, q, k, v, bias=inf_bias, return_logsumexp=True)
  want, want_lse = run(
    impl, q, k, v, bias=jnp.asarray(bias), mask=jnp.asarray(mask), return_logsumexp=True
  )
  assert_close(out, want, 2e-5)
  np.testing.assert_array_equal(np.asarray(out[1, 4]), 0)
  assert np.all(np.isneginf(lse[1, 4]))
  assert_close(jnp.nan_to_num(lse, neginf=0), jnp.nan_to_num(want_lse, neginf=0), 1e-5)
  w = cotangent_like(q)
  got = grads(impl, q, k, v, dict(bias=inf_bias), w)
  oracle = grads("xla", q, k, v, dict(bias=inf_bias), w)
  for name, a, b in zip(["dq", "dk", "dv", "dbias"], got, oracle):
    assert np.all(np.isfinite(np.asarray(a))), name
    assert_close(a, b, 1e-4, err_msg=name)
  np.testing.assert_array_equal(np.asarray(got[3])[~np.broadcast_to(mask, got[3].shape)], 0)


# ---------------------------------------------------------------- drop-in for jax.nn


def _drop_in_cases(d):
  ql = lengths(d.batch, d.q_len)
  short = jnp.full((d.batch,), d.q_len - 3, jnp.int32)  # every row padded
  return {
    "plain": {},
    "bias_full": dict(bias=bias_of(d, "BNTS")),
    "bias_1NTS": dict(bias=bias_of(d, "1NTS")),
    "bias_111S": dict(bias=bias_of(d, "111S")),
    "mask_B1TS": dict(mask=mask_of(d, "B1TS")),
    "causal": dict(is_causal=True),
    "window": dict(local_window_size=5),
    "window_pair": dict(local_window_size=(3, 1)),
    "kv_lengths": dict(key_value_seq_lengths=lengths(d.batch, d.kv_len)),
    "q_lengths_causal": dict(query_seq_lengths=short, is_causal=True),
    "both_lengths_causal": dict(query_seq_lengths=ql, key_value_seq_lengths=ql, is_causal=True),
    "q_lengths_window": dict(query_seq_lengths=short, local_window_size=3),
    "scale_bias_mask": dict(scale=0.5, bias=bias_of(d, "B1TS"), mask=mask_of(d, "1NTS")),
  }


# "q_lengths_causal" / "q_lengths_window" fail today (a library bug, see the
# report): with query_seq_lengths but no key_value_seq_lengths, jaxdnn aligns the
# causal / window diagonal bottom-right to the valid query length
# (diag = i + kv_len - q_length), while jax.nn keeps it top-left (diag = i).
DROP_IN_CASES = [
  "plain",
  "bias_full",
  "bias_1NTS",
  "bias_111S",
  "mask_B1TS",
  "causal",
  "window",
  "window_pair",
  "kv_lengths",
  "both_lengths_causal",
  "scale_bias_mask",
  "q_lengths_causal",
  "q_lengths_window",
]


@pytest.mark.parametrize(
  "dims", [Dims(2, 33, 33, 4, 4, 64), Dims(2, 33, 33, 8, 2, 40), Dims(1, 7, 7, 8, 1, 128)], ids=str
)
@pytest.mark.parametrize("case", DROP_IN_CASES)
def test_drop_in_for_jax_nn(case, dims):
  # float32 products in both (jax.nn's would be TF32 on a GPU by default).
  with jax.default_matmul_precision("highest"):
    _check_drop_in(case, dims)


def _check_drop_in(case, dims):
  kw = _drop_in_cases(dims)[case]
  q, k, v = qkv(dims)
  arrays, static = split_kwargs(kw)
  # Padded query rows: jax.nn gives them an average of the values, jaxdnn zeros.
  valid = np.ones((dims.batch, dims.q_len, 1, 1), np.float32)
  if "query_seq_lengths" in kw:
    valid = np.arange(dims.q_len)[None, :] < np.asarray(kw["query_seq_lengths"])[:, None]
    valid = valid[:, :, None, None].astype(np.float32)
  theirs = lambda q, k, v, a: jax.nn.dot_product_attention(
    q, k, v, implementation="xla", **static, **a
  )
  for impl in (None, "xla"):
    got = jit(attention_fn(impl, static), impl)(q, k, v, arrays)
    want = jit(theirs, "xla")(q, k, v, arrays)
    assert_close(got * valid, want * valid, 2e-5)
  # Gradients too (bias included), with zero weight on padded query rows.
  w = cotangent_like(q) * valid
  bias = arrays.pop("bias", None)
  argnums = (0, 1, 2) if bias is None else (0, 1, 2, 3)

  def loss(f, impl):
    def l(q, k, v, bias, a):
      a = a if bias is None else dict(a, bias=bias)
      return jnp.sum(f(q, k, v, a) * w)

    return jit(jax.grad(l, argnums=argnums), impl)

  got = loss(attention_fn(None, static), None)(q, k, v, bias, arrays)
  want = loss(theirs, "xla")(q, k, v, bias, arrays)
  for g, x in zip(got, want):
    assert_close(g, x, 1e-4)


# float32 in: on a GPU that falls back to XLA (TF32 dots), so CPU only.
@requires_cpu_backend
def test_drop_in_unbatched():
  q, k, v = qkv(Dims(1, 33, 33, 4, 2, 64))
  q, k, v = q[0], k[0], v[0]
  bias = rand((4, 33, 33))
  got = jax.jit(jaxdnn.dot_product_attention)(q, k, v, bias)
  theirs = lambda *a: jax.nn.dot_product_attention(*a, implementation="xla")
  want = jit(theirs, "xla")(q, k, v, bias)
  assert got.shape == (33, 4, 64)
  assert_close(got, want, 2e-5)


# ---------------------------------------------------------------- unbatched inputs


@pytest.mark.parametrize("impl", KERNELS, ids=str)
def test_unbatched_3d(impl):
  q, k, v = qkv(Dims(1, 7, 33, 4, 2, 64))
  q, k, v = q[0], k[0], v[0]
  kw = dict(
    bias=rand((4, 7, 33)),
    mask=bernoulli(0.9, (7, 33)),
    query_segment_ids=segment_ids(1, 7)[0],
    key_value_segment_ids=segment_ids(1, 33)[0],
    is_causal=True,
    return_logsumexp=True,
  )
  out, lse = run(impl, q, k, v, **kw)
  assert out.shape == (7, 4, 64) and lse.shape == (7, 4)
  want_out, want_lse = run("xla", q, k, v, **kw)
  assert_close(out, want_out, 2e-5)
  assert_close(jnp.nan_to_num(lse, neginf=0), jnp.nan_to_num(want_lse, neginf=0), 1e-5)
  batched = dict(
    kw,
    query_segment_ids=kw["query_segment_ids"][None],
    key_value_segment_ids=kw["key_value_segment_ids"][None],
  )
  out4, _ = run(impl, q[None], k[None], v[None], **batched)
  assert_close(out, out4[0], 1e-6)
  kw.pop("return_logsumexp")
  _grad_check(impl, q, k, v, kw)


# ---------------------------------------------------------------- transformations


def _vmap_pair(in_axes, out_axes=0, **static):
  def f(impl):
    return jit(
      jax.vmap(
        lambda q, k, v, a: jaxdnn.dot_product_attention(
          q, k, v, implementation=impl, **static, **a
        ),
        in_axes=in_axes,
        out_axes=out_axes,
      ),
      impl,
    )

  return f(None), f("xla")


def test_vmap_extra_leading_axis():
  q, k, v = (x.reshape((3, 2) + x.shape[1:]) for x in qkv(Dims(6, 7, 33, 4, 2, 64)))
  a = dict(bias=rand((3, 2, 4, 7, 33)), key_value_seq_lengths=jnp.stack([lengths(2, 33)] * 3))
  got, want = (f(q, k, v, a) for f in _vmap_pair(0, is_causal=True))
  assert got.shape == q.shape
  assert_close(got, want, 2e-5)
  # == one call on the merged batch.
  merged = run(
    None,
    q.reshape((6,) + q.shape[2:]),
    k.reshape((6,) + k.shape[2:]),
    v.reshape((6,) + v.shape[2:]),
    bias=a["bias"].reshape((6, 4, 7, 33)),
    key_value_seq_lengths=a["key_value_seq_lengths"].reshape(6),
    is_causal=True,
  )
  assert_close(got.reshape(merged.shape), merged, 1e-6)


def test_vmap_key_value_unbatched():
  q, k, v = qkv(Dims(2, 7, 33, 8, 1, 64))
  qs = rand((5,) + q.shape)
  # mask unbatched (broadcast over batch), lengths batched per vmapped element.
  a = dict(
    mask=mask_of(Dims(2, 7, 33, 8, 1, 64), "1NTS"),
    query_seq_lengths=jnp.stack([lengths(2, 7) for _ in range(5)]),
  )
  in_axes = (0, None, None, dict(mask=None, query_seq_lengths=0))
  got, want = (f(qs, k, v, a) for f in _vmap_pair(in_axes, local_window_size=(4, 4)))
  assert_close(got, want, 2e-5)


def test_vmap_non_leading_axis():
  q, k, v = qkv(Dims(2, 7, 33, 4, 2, 64))
  # The vmapped axis is axis 2 of q (before heads) and axis 1 of k/v; the
  # bias is mapped on its last axis and the segment ids are unbatched.
  qs = rand(q.shape[:2] + (3,) + q.shape[2:])
  ks, vs = rand((2, 3) + k.shape[1:]), rand((2, 3) + v.shape[1:])
  a = dict(
    bias=rand((1, 4, 7, 33, 3)),
    query_segment_ids=segment_ids(2, 7),
    key_value_segment_ids=segment_ids(2, 33),
  )
  in_axes = (2, 1, 1, dict(bias=4, query_segment_ids=None, key_value_segment_ids=None))
  got, want = (f(qs, ks, vs, a) for f in _vmap_pair(in_axes, out_axes=1, softcap=3.0))
  assert got.shape == (2, 3, 7, 4, 64)
  assert_close(got, want, 2e-5)


def test_vmap_unbatched_inputs_and_nested():
  q, k, v = qkv(Dims(6, 7, 33, 4, 2, 64))
  bias = rand((4, 7, 33))
  got, want = (
    f(q, k, v, dict(bias=bias)) for f in _vmap_pair((0, 0, 0, dict(bias=None)), is_causal=True)
  )
  assert_close(got, want, 2e-5)
  # vmap of vmap of 3-D calls.
  qn, kn, vn = (x.reshape((2, 3) + x.shape[1:]) for x in (q, k, v))
  f = lambda impl: jit(
    jax.vmap(
      jax.vmap(
        lambda q, k, v: jaxdnn.dot_product_attention(
          q, k, v, bias, is_causal=True, implementation=impl
        )
      )
    ),
    impl,
  )
  assert_close(f(None)(qn, kn, vn), f("xla")(qn, kn, vn), 2e-5)


@pytest.mark.parametrize("bias_kind", ["none", "1NTS", "BNTS", "B1TS", "mapped_1NTS"])
def test_vmap_of_grad(bias_kind):
  dims = Dims(2, 7, 33, 4, 2, 64)
  q, k, v = qkv(dims)
  qs = rand((3,) + q.shape)
  ws = rand((3,) + q.shape)
  bias_axis = None
  if bias_kind == "none":
    bias = None
  elif bias_kind == "mapped_1NTS":  # a per-example bias that broadcasts over the batch
    bias, bias_axis = rand((3, 1, 4, 7, 33)), 0
  else:
    bias = bias_of(dims, bias_kind)
  argnums = (0, 1, 2) if bias is None else (0, 1, 2, 3)

  def per_example(impl):
    loss = lambda q, k, v, bias, w: jnp.sum(
      jaxdnn.dot_product_attention(q, k, v, bias, is_causal=True, implementation=impl) * w
    )
    return jit(
      jax.vmap(jax.grad(loss, argnums=argnums), in_axes=(0, None, None, bias_axis, 0)), impl
    )

  got, want = per_example(None)(qs, k, v, bias, ws), per_example("xla")(qs, k, v, bias, ws)
  for g, w in zip(got, want):
    assert g.shape == w.shape
    assert_close(g, w, 1e-4)


def test_grad_of_vmap_with_shared_bias():
  # The bias is shared by every vmapped element: its gradient sums over them.
  dims = Dims(2, 7, 33, 4, 2, 64)
  q, k, v = qkv(dims)
  qs = rand((3,) + q.shape)
  w = rand(qs.shape)
  bias = bias_of(dims, "1NTS")

  def g(impl):
    f = jax.vmap(
      lambda q, b: jaxdnn.dot_product_attention(q, k, v, b, implementation=impl), in_axes=(0, None)
    )
    return jit(jax.grad(lambda q, b: jnp.sum(f(q, b) * w), argnums=(0, 1)), impl)

  for a, b in zip(g(None)(qs, bias), g("xla")(qs, bias)):
    assert_close(a, b, 1e-4)


def test_check_grads_float32():
  dims = Dims(1, 5, 6, 2, 1, 8)
  q, k, v = qkv(dims)
  bias = bias_of(dims, "1NTS")

  def f(q, k, v, bias):
    out, lse = jaxdnn.dot_product_attention(
      q, k, v, bias, softcap=3.0, local_window_size=(3, 2), return_logsumexp=True
    )
    return out, lse

  check_grads(f, (q, k, v, bias), order=1, modes=["rev"], atol=2e-2, rtol=2e-2, eps=1e-3)
  g = lambda q, k, v: jaxdnn.dot_product_attention(
    q, k, v, is_causal=True, implementation=None if on_gpu() else "cpu"
  )
  check_grads(g, (q, k, v), order=1, modes=["rev"], atol=2e-2, rtol=2e-2, eps=1e-3)


# float32 in: on a GPU that falls back to XLA (TF32 dots), so CPU only.
@requires_cpu_backend
def test_checkpoint():
  dims = Dims(2, 33, 33, 4, 2, 64)
  q, k, v = qkv(dims)
  bias = bias_of(dims, "B1TS")
  w = cotangent_like(q)

  def loss(impl):
    f = jax.checkpoint(
      lambda q, k, v, b: jnp.sin(
        jaxdnn.dot_product_attention(q, k, v, b, is_causal=True, implementation=impl)
      )
    )
    return lambda q, k, v, b: jnp.sum(f(q, k, v, b) * w)

  g = jax.jit(jax.grad(loss(None), argnums=(0, 1, 2, 3)))
  for a, b in zip(
    g(q, k, v, bias), jit(jax.grad(loss("xla"), argnums=(0, 1, 2, 3)), "xla")(q, k, v, bias)
  ):
    assert_close(a, b, 1e-4)
  text = g.lower(q, k, v, bias).compile().as_text()
  assert FWD_TARGET in text and BWD_TARGET in text


# ---------------------------------------------------------------- the kernel really runs


@requires_cpu_backend
@pytest.mark.parametrize("option", ["plain", "everything"])
@pytest.mark.parametrize("impl", KERNELS, ids=str)
def test_hlo_contains_jaxdnn_custom_call(option, impl):
  dims = Dims(2, 7, 33, 4, 2, 64)
  q, k, v = qkv(dims)
  kw = dict(OPTIONS[option](dims), dropout_rate=0.1, dropout_rng=key())
  kw.pop("bias", None)
  arrays, static = split_kwargs(kw)
  bias = bias_of(dims, "1NTS")
  w = cotangent_like(q)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # no silent fallback on CPU
    fwd = hlo(
      lambda q, k, v, b, a: attention_fn(impl, static)(q, k, v, dict(a, bias=b)),
      q,
      k,
      v,
      bias,
      arrays,
    )
    bwd = hlo(
      jax.grad(loss_fn(impl, static, w, rand((2, 7, 4))), argnums=(0, 1, 2, 3)),
      q,
      k,
      v,
      bias,
      arrays,
    )
  assert FWD_TARGET in fwd
  assert FWD_TARGET in bwd and BWD_TARGET in bwd
  xla = hlo(lambda q, k, v, a: attention_fn("xla", static)(q, k, v, a), q, k, v, arrays)
  assert "jaxdnn_attention" not in xla


# ---------------------------------------------------------------- GPU

# Head dims 64/128/256 natively; 96 and 40 are zero-padded up by the API.
GPU_DIMS = [
  Dims(4, 512, 512, 16, 4, 128),
  Dims(2, 1, 1024, 32, 8, 128),
  Dims(2, 1000, 1000, 8, 8, 64),
  Dims(1, 384, 256, 8, 1, 256),
  Dims(2, 200, 300, 8, 2, 96),
  Dims(1, 77, 77, 4, 4, 40),
  Dims(1, 1537, 1537, 8, 2, 128),
]


def _gpu_kernel_expected(direction="fwd"):
  return _extension.has_cuda_target(f"jaxdnn_attention_{direction}")


@requires_gpu
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=dtype_name)
@pytest.mark.parametrize("dims", GPU_DIMS, ids=str)
@pytest.mark.parametrize(
  "option", ["plain", "causal", "window_pair", "both_lengths", "segments", "bias_1NTS", "softcap"]
)
def test_gpu_matches_oracle(option, dims, dtype):
  kw = OPTIONS[option](dims)
  if "bias" in kw:
    kw["bias"] = kw["bias"].astype(dtype)
  with warnings.catch_warnings():
    if not _gpu_kernel_expected():
      warnings.simplefilter("ignore")
    q, k, v = _fwd_check(None, dims, dtype, kw)
    _grad_check(None, q, k, v, kw, with_lse=option == "plain")
    if _gpu_kernel_expected():
      arrays, static = split_kwargs(kw)
      w = cotangent_like(q)
      bias = arrays.pop("bias", None)
      text = hlo(jax.grad(loss_fn(None, static, w), argnums=(0, 1, 2)), q, k, v, bias, arrays)
      assert FWD_TARGET in text
      # The CUDA backward may still be the composed JAX one (no kernel target yet).
      assert (BWD_TARGET in text) == _gpu_kernel_expected("bwd")


@requires_gpu
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=dtype_name)
def test_gpu_dropout_matches_oracle(dtype):
  dims = Dims(2, 256, 256, 8, 2, 128)
  kw = dict(dropout_rate=0.2, dropout_rng=key(), is_causal=True)
  with warnings.catch_warnings():
    if not _gpu_kernel_expected():
      warnings.simplefilter("ignore")
    q, k, v = _fwd_check(None, dims, dtype, kw)
    _grad_check(None, q, k, v, kw)


# Long sequences reach the fused Hopper backward: its unordered dQ from 512
# query rows (deterministic=False; head-major grid; head dim 64 in 128-query
# steps), the ordered one from 8192; 1000 and 2500 leave partial query and key
# blocks (and 80-query steps cut at q_len), 600 and 2100 at head dim 64 an odd
# count of 64-row dQ blocks (the last 128-query step writes one). Head dim 256
# at 1537: the dense forward's 80-key blocks with a partial last block (and,
# causal, tiles whose diagonal crosses three of them). Causal head dim 128 over
# 8192 keys with an even number of query tiles: the forward's causal pairs
# (clusters of two on the dynamic scheduler).
LONG_DIMS = [
  Dims(1, 1000, 1000, 4, 2, 128),
  Dims(2, 600, 600, 4, 4, 64),
  Dims(1, 9216, 9216, 4, 2, 128),
  Dims(2, 2048, 2048, 4, 2, 128),
  Dims(1, 2500, 2500, 4, 2, 128),
  Dims(1, 4096, 4096, 4, 2, 128),
  Dims(1, 8192, 8192, 2, 2, 128),
  Dims(2, 2048, 2048, 4, 2, 64),
  Dims(1, 2100, 2100, 4, 4, 64),
  Dims(1, 8192, 8192, 2, 1, 64),
  Dims(1, 1537, 1537, 4, 2, 256),
]


@requires_gpu
@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dims", LONG_DIMS, ids=str)
def test_gpu_long_sequence_backward_matches_oracle(dims, causal, deterministic):
  kw = dict(is_causal=causal, deterministic=deterministic)
  q, k, v = _fwd_check(None, dims, jnp.bfloat16, kw, lse=False)
  _grad_check(None, q, k, v, kw)


# Packed documents long enough for the fused backward's thresholds: about 24
# documents per row, so short ones (under one 64-row block) sit beside ones
# spanning several blocks.
LONG_SEGMENT_DIMS = [
  Dims(1, 1000, 1000, 4, 2, 128),
  Dims(2, 2048, 2048, 4, 2, 128),
  Dims(1, 2500, 2500, 4, 2, 128),
  Dims(2, 2048, 2048, 4, 2, 64),
  Dims(1, 2100, 2100, 4, 4, 64),
  Dims(1, 8192, 8192, 2, 1, 128),
]


@requires_gpu
@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dims", LONG_SEGMENT_DIMS, ids=str)
def test_gpu_long_packed_documents_backward_matches_oracle(dims, causal, deterministic):
  seg_q = segment_ids(dims.batch, dims.q_len, docs=24)
  kw = dict(
    is_causal=causal,
    deterministic=deterministic,
    query_segment_ids=seg_q,
    key_value_segment_ids=seg_q,
  )
  q, k, v = _fwd_check(None, dims, jnp.bfloat16, kw, lse=False)
  _grad_check(None, q, k, v, kw)


@requires_gpu
@pytest.mark.parametrize(
  "dims", [Dims(2, 512, 512, 8, 2, 128), Dims(1, 8192, 8192, 2, 2, 128)], ids=str
)
def test_gpu_deterministic_backward(dims):
  q, k, v = qkv(dims, jnp.bfloat16)
  w = cotangent_like(q)
  loss = lambda q, k, v: jnp.sum(
    jaxdnn.dot_product_attention(q, k, v, is_causal=True, deterministic=True).astype(jnp.float32)
    * w
  )
  with warnings.catch_warnings():
    if not _gpu_kernel_expected():
      warnings.simplefilter("ignore")
    g = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    a, b = g(q, k, v), g(q, k, v)
  for x, y in zip(a, b):
    np.testing.assert_array_equal(np.asarray(x, np.float32), np.asarray(y, np.float32))


@requires_gpu
def test_gpu_128k_token_sequence_forward_and_backward():
  """One 131072-token causal sequence (the kernels use O(N) memory): forward and
  backward run, and the rows that a short reference can check match it."""
  t, n, d, edge = 131072, 8, 128, 256
  ks = jax.random.split(jax.random.PRNGKey(3), 4)
  q, k, v, w = (jax.random.normal(kk, (1, t, n, d), jnp.bfloat16) for kk in ks)
  f = lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, is_causal=True)
  loss = lambda f, w: lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32) * w)
  out = jax.jit(f)(q, k, v)
  dq, dk, dv = jax.jit(jax.grad(loss(f, w.astype(jnp.float32)), argnums=(0, 1, 2)))(q, k, v)
  assert all(bool(jnp.all(jnp.isfinite(x))) for x in (out, dq, dk, dv))
  f32 = lambda x: x.astype(jnp.float32)
  ref = lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, is_causal=True, implementation="xla")
  # The first rows see only the first keys; their dQ needs nothing else.
  head = [f32(x[:, :edge]) for x in (q, k, v, w)]
  assert_close(out[:, :edge], jax.jit(ref)(*head[:3]), tol(jnp.bfloat16))
  dq_head = jax.jit(jax.grad(loss(ref, head[3]), argnums=0))(*head[:3])
  assert_close(dq[:, :edge], dq_head, grad_tol(jnp.bfloat16), err_msg="dq")
  # The last rows see every key (a short query block is aligned bottom-right),
  # and only they reach the last keys, so those keys' dK/dV come from them.
  q_tail, w_tail = f32(q[:, -edge:]), f32(w[:, -edge:])
  assert_close(out[:, -edge:], jax.jit(ref)(q_tail, f32(k), f32(v)), tol(jnp.bfloat16))
  _, dk_ref, dv_ref = jax.jit(jax.grad(loss(ref, w_tail), argnums=(0, 1, 2)))(
    q_tail, f32(k), f32(v)
  )
  assert_close(dk[:, -edge:], dk_ref[:, -edge:], grad_tol(jnp.bfloat16), err_msg="dk")
  assert_close(dv[:, -edge:], dv_ref[:, -edge:], grad_tol(jnp.bfloat16), err_msg="dv")


# Decode shapes (a few query tokens over a long key/value cache): the split-KV
# decode forward (cpp/attention/sm80/decode_split.cu) takes these unless
# JAXDNN_ATTENTION_DECODE=0 (read in C++ at first use, so the test sets
# nothing; with it off they check the kernels that take them instead).
# Their combine step merges 128, 32, 16, 16 and 64 slots per row (8, 2, 1, 1
# and 4 warps per row).
DECODE_DIMS = [
  Dims(1, 1, 16384, 16, 16, 128),
  Dims(2, 4, 4096, 16, 4, 64),
  Dims(1, 16, 8192, 16, 1, 256),
  Dims(4, 1, 2048, 8, 2, 128),
  Dims(1, 1, 8192, 8, 8, 128),
]


@requires_gpu
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=dtype_name)
@pytest.mark.parametrize("dims", DECODE_DIMS, ids=str)
@pytest.mark.parametrize("option", ["plain", "causal", "window_pair", "both_lengths", "softcap"])
def test_gpu_decode_shapes_match_oracle(option, dims, dtype):
  with warnings.catch_warnings():
    if not _gpu_kernel_expected():
      warnings.simplefilter("ignore")
    _fwd_check(None, dims, dtype, OPTIONS[option](dims))


@pytest.mark.parametrize("impl", KERNELS, ids=str)
def test_backward_is_deterministic_across_threads(impl):
  # Many (batch, head) work items on the CPU thread pool, a bias gradient too.
  dims = Dims(4, 33, 40, 4, 2, 32)
  q, k, v = qkv(dims)
  bias = rand((4, 4, 33, 40))
  w = cotangent_like(q)
  loss = lambda q, k, v, b: jnp.sum(
    jaxdnn.dot_product_attention(q, k, v, b, is_causal=True, implementation=impl) * w
  )
  g = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))
  first = g(q, k, v, bias)
  for _ in range(3):
    for x, y in zip(first, g(q, k, v, bias)):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
