"""Attention edges a demanding user hits: NaN/Inf as the reference,
jax.debug_infs, 64-bit ids and lengths, jax.nn's return_residual, zero
query heads."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdnn

KERNELS = [None] + ([] if jax.default_backend() == "gpu" else ["cpu"])


def _qkv(dtype=jnp.float32, shape=(2, 6, 4, 16), kv_heads=2):
  keys = jax.random.split(jax.random.key(3), 3)
  b, t, n, d = shape
  return (
    jax.random.normal(keys[0], shape, dtype),
    jax.random.normal(keys[1], (b, t + 1, kv_heads, d), dtype),
    jax.random.normal(keys[2], (b, t + 1, kv_heads, d), dtype),
  )


def _same_nans_and_close(got, want, tol):
  got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
  np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
  finite = np.isfinite(want)
  np.testing.assert_allclose(got[finite], want[finite], rtol=tol, atol=tol)


def _poison(where, q, k, v, bias):
  """One NaN (or +inf in the query) in the named operand."""
  if where == "query":
    q = q.at[1, 2, 0, 3].set(jnp.nan)
  elif where == "key":
    k = k.at[0, 4, 1, 0].set(jnp.nan)
  elif where == "value":
    v = v.at[0, 1, 0, 5].set(jnp.nan)
  elif where == "bias":
    bias = bias.at[0, 2, 3, 4].set(jnp.nan)
  else:
    q = q.at[1, 2, 0, 3].set(jnp.inf)
  return q, k, v, bias


@pytest.mark.parametrize("impl", KERNELS)
@pytest.mark.parametrize("where", ["query", "key", "value", "bias", "query_inf"])
def test_attention_nan_and_inf_propagate_as_the_reference(impl, where):
  q, k, v = _qkv()
  bias = jax.random.normal(jax.random.key(5), (1, 4, 6, 7))
  q, k, v, bias = _poison(where, q, k, v, bias)

  def run(implementation):
    f = lambda q, k, v, b: jaxdnn.dot_product_attention(
      q, k, v, b, return_logsumexp=True, implementation=implementation
    )
    out, lse = f(q, k, v, bias)
    loss = lambda q, k, v, b: jnp.sum(f(q, k, v, b)[0] * jnp.arange(16.0))
    return (out, lse) + tuple(jax.grad(loss, argnums=(0, 1, 2, 3))(q, k, v, bias))

  for got, want in zip(run(impl), run("xla")):
    _same_nans_and_close(got, want, 1e-4)


@pytest.mark.parametrize("implementation", [None, "xla"])
def test_fully_masked_row_under_debug_infs(implementation):
  q, k, v = _qkv(shape=(1, 4, 2, 8), kv_heads=2)
  mask = jnp.ones((1, 1, 4, 5), bool).at[..., 0, :].set(False)  # query row 0 attends nothing
  with jax.debug_infs(True):
    out = jaxdnn.dot_product_attention(q, k, v, mask=mask, implementation=implementation)
  np.testing.assert_array_equal(np.asarray(out[:, 0]), 0.0)


def test_return_residual_is_jax_nn_s():
  q, k, v = _qkv()
  out, res = jaxdnn.dot_product_attention(q, k, v, return_residual=True)
  with jax.default_matmul_precision("highest"):  # not TF32 on a GPU: the reference's products
    want_out, want_res = jax.nn.dot_product_attention(q, k, v, return_residual=True)
  assert res.shape == want_res.shape and res.dtype == want_res.dtype
  np.testing.assert_allclose(np.asarray(res), np.asarray(want_res), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(out), np.asarray(want_out), rtol=1e-5, atol=1e-5)
  both = jaxdnn.dot_product_attention(q, k, v, return_residual=True, return_logsumexp=True)
  assert len(both) == 3 and both[2].dtype == jnp.float32


@pytest.mark.parametrize("impl", KERNELS)
def test_zero_query_heads_give_zero_key_value_gradients(impl):
  q = jnp.ones((2, 3, 0, 8))
  k = v = jax.random.normal(jax.random.key(1), (2, 4, 2, 8))
  loss = lambda k, v: jnp.sum(jaxdnn.dot_product_attention(q, k, v, implementation=impl))
  dk, dv = jax.grad(loss, argnums=(0, 1))(k, v)
  np.testing.assert_array_equal(np.asarray(dk), 0.0)
  np.testing.assert_array_equal(np.asarray(dv), 0.0)


def test_64_bit_ids_and_lengths_do_not_wrap():
  # With x64, ids 0, 2^32, 2^33 stay distinct documents and a length of
  # 2^32 + 3 stays "all of it"; in a subprocess (x64 is process-wide).
  code = """
import jax; jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, numpy as np, jaxdnn
q = jax.random.normal(jax.random.key(0), (1, 6, 2, 16), jnp.float32)
ids = jnp.array([[0, 0, 2**32, 2**32, 2**33, 2**33]], jnp.int64)
lens = jnp.array([2**32 + 3], jnp.int64)
segments = dict(query_segment_ids=ids, key_value_segment_ids=ids)
for kw in (segments, dict(key_value_seq_lengths=lens)):
  got = jaxdnn.dot_product_attention(q, q, q, **kw)
  want = jaxdnn.dot_product_attention(q, q, q, **kw, implementation="xla")
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
# Distinct documents: each query attends its own pair only.
two = jaxdnn.dot_product_attention(q, q, q, query_segment_ids=ids, key_value_segment_ids=ids)
pair = jaxdnn.dot_product_attention(q[:, 2:4], q[:, 2:4], q[:, 2:4])
np.testing.assert_allclose(np.asarray(two[:, 2:4]), np.asarray(pair), rtol=1e-5, atol=1e-5)
print("ok")
"""
  env = dict(os.environ, XLA_FLAGS="")
  out = subprocess.run(
    [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/"
  )
  assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("where", ["query", "key", "value", "bias", "query_inf"])
def test_cuda_nan_and_inf_propagate_as_the_reference(where, dtype):
  q, k, v = _qkv(dtype, shape=(2, 40, 4, 64))
  bias = jax.random.normal(jax.random.key(5), (1, 4, 40, 41))
  q, k, v, bias = _poison(where, q, k, v, bias)

  def run(implementation):
    f = lambda q, k, v, b: jaxdnn.dot_product_attention(
      q, k, v, b, return_logsumexp=True, implementation=implementation
    )
    out, lse = f(q, k, v, bias)
    weights = jnp.arange(64.0) / 64
    loss = lambda q, k, v, b: jnp.sum(f(q, k, v, b)[0].astype(jnp.float32) * weights)
    return (out, lse) + tuple(jax.grad(loss, argnums=(0, 1, 2, 3))(q, k, v, bias))

  names = ("out", "lse", "dq", "dk", "dv", "dbias")
  for name, got, want in zip(names, run("cuda"), run("xla")):
    try:
      _same_nans_and_close(got, want, 5e-2)
    except AssertionError as e:
      raise AssertionError(f"{name}: {e}") from None


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a CUDA GPU")
def test_cuda_float16_large_logits_stay_finite_where_the_reference_does():
  q, k, v = _qkv(jnp.float16, shape=(2, 40, 4, 64))
  q, k = q * 1e4, k * 1e4  # logits around 1e9, far past float16's range

  def run(implementation):
    f = lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, implementation=implementation)
    loss = lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32))
    return (f(q, k, v),) + tuple(jax.grad(loss, argnums=(0, 1, 2))(q, k, v))

  for name, got, want in zip(("out", "dq", "dk", "dv"), run("cuda"), run("xla")):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    finite = np.isfinite(want)
    assert np.isfinite(got[finite]).all(), f"{name}: {np.sum(~np.isfinite(got[finite]))} not finite"


def test_a_mask_joins_a_bias_only_within_the_bias_shape():
  # On Hopper a mask rides on the bias kernels as a 0 / -inf bias; summed into
  # a bias it may not grow it (an [1, N, T, S] bias with a [B, 1, 1, S] mask
  # would grow B-fold), nor join a float32 bias (the kernels take 16 bits).
  from jaxdnn.attention import api

  q, k, _ = _qkv(jnp.bfloat16)
  bias = jnp.zeros((1, 4, 6, 7), jnp.bfloat16)
  mask = jnp.ones((2, 1, 1, 7), bool)
  assert api._mask_as_bias(q, k, 16, bias, mask, 0, None) is None
  assert api._mask_as_bias(q, k, 16, bias.astype(jnp.float32), mask[:1], 0, None) is None
