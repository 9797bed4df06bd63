"""Value head dims other than the query/key's (MLA: DeepSeek's 192/128):
the output takes value's head dim; every implementation against the "xla"
oracle, whose formula is checked against float64 numpy; gradients too."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_cases import FWD_TARGET, assert_close, grad_tol, hlo, rand, tol

import jaxdnn
from jaxdnn import switches

ON_GPU = jax.default_backend() == "gpu"
KERNELS = [None] + ([] if ON_GPU else ["cpu"])
DTYPE = jnp.bfloat16 if ON_GPU else jnp.float32

# (batch, q_len, kv_len, heads, kv_heads, qk head dim, value head dim)
SHAPES = [
  (2, 9, 9, 4, 2, 24, 16),
  (1, 7, 12, 4, 4, 16, 40),
  (2, 33, 33, 8, 1, 192, 128),
  (1, 5, 20, 2, 2, 128, 64),
]


def _qkv(shape, dtype):
  b, t, s, n, k, dqk, dv = shape
  return (
    rand((b, t, n, dqk), dtype),
    rand((b, s, k, dqk), dtype),
    rand((b, s, k, dv), dtype),
  )


def _run(impl, q, k, v, **kw):
  return jax.jit(lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, implementation=impl, **kw))(
    q, k, v
  )


def _grads(impl, q, k, v, w, causal):
  """d(sum(out * w)) / d(q, k, v), jitted."""
  loss = lambda q, k, v: jnp.sum(
    jaxdnn.dot_product_attention(q, k, v, is_causal=causal, implementation=impl).astype(jnp.float32)
    * w
  )
  return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)


@pytest.mark.parametrize("impl", KERNELS, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_gradients_match_the_oracle(impl, shape, causal):
  q, k, v = _qkv(shape, DTYPE)
  out = _run(impl, q, k, v, is_causal=causal)
  want = _run("xla", q, k, v, is_causal=causal)
  assert out.shape == q.shape[:-1] + v.shape[-1:] and out.dtype == q.dtype
  assert_close(out, want, tol(DTYPE))
  w = rand(out.shape)

  for got, want, name in zip(
    _grads(impl, q, k, v, w, causal), _grads("xla", q, k, v, w, causal), "qkv"
  ):
    assert got.shape == want.shape
    assert_close(got, want, grad_tol(DTYPE), err_msg=name)


def test_the_oracle_matches_float64_numpy():
  q, k, v = _qkv((1, 5, 7, 2, 1, 12, 6), jnp.float32)
  out = _run("xla", q, k, v)
  qq, kk, vv = (np.asarray(x, np.float64) for x in (q, k, v))
  kk, vv = np.repeat(kk, 2, axis=2), np.repeat(vv, 2, axis=2)
  logits = np.einsum("btnd,bsnd->bnts", qq, kk) / np.sqrt(12)
  p = np.exp(logits - logits.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  np.testing.assert_allclose(np.asarray(out), np.einsum("bnts,bsnd->btnd", p, vv), atol=2e-6)


def test_with_sinks_and_the_kernel_in_the_hlo():
  q, k, v = _qkv(SHAPES[0], DTYPE)
  s = rand((4,))
  f = lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, sinks=s)
  assert FWD_TARGET in hlo(f, q, k, v)
  assert_close(_run(None, q, k, v, sinks=s), _run("xla", q, k, v, sinks=s), tol(DTYPE))


# Value at its own columns on the sm90 forward (cpp/attention/sm90/
# forward_config.cuh, kDv): 192/128, and 128/64 where
# JAXDNN_ATTENTION_SM90_VALUE_DIM_64=1 is set for the run (else padded);
# query tiles past the first, partial tiles, GQA, both 16-bit dtypes,
# causal and not; the backward pads value to the query's head dim.
SM90_MLA = [
  (2, 700, 700, 4, 2, 192, 128),
  (1, 257, 257, 8, 8, 192, 128),
  (2, 700, 700, 4, 2, 128, 64),
  (1, 257, 257, 8, 8, 128, 64),
  # 256 query tiles: persistent CTAs reuse their Q and O buffers across tiles.
  (2, 2048, 2048, 8, 2, 192, 128),
  (2, 2048, 2048, 8, 2, 128, 64),
]


@pytest.mark.skipif(not ON_GPU, reason="needs a GPU")
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=str)
@pytest.mark.parametrize("shape", SM90_MLA, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_value_at_its_own_head_dim_on_cuda(dtype, shape, causal):
  q, k, v = _qkv(shape, dtype)
  out = _run("cuda", q, k, v, is_causal=causal)
  assert_close(out, _run("xla", q, k, v, is_causal=causal), tol(dtype))
  w = rand(out.shape)

  for got, want, name in zip(
    _grads("cuda", q, k, v, w, causal), _grads("xla", q, k, v, w, causal), "qkv"
  ):
    assert got.shape == want.shape
    assert_close(got, want, grad_tol(dtype), err_msg=name)


@pytest.mark.skipif(
  not ON_GPU or getattr(jax.devices()[0], "compute_capability", "") != "9.0",
  reason="needs an sm90 GPU",
)
@pytest.mark.parametrize("shape", [SM90_MLA[0], SM90_MLA[2]], ids=str)
def test_value_runs_unpadded_on_sm90(shape):
  if shape[-2] == 128 and switches.value("JAXDNN_ATTENTION_SM90_VALUE_DIM_64") != "1":
    pytest.skip("128/64 runs value at its own columns under JAXDNN_ATTENTION_SM90_VALUE_DIM_64=1")
  q, k, v = _qkv(shape, jnp.bfloat16)
  f = lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, implementation="cuda")
  text = hlo(f, q, k, v)
  assert FWD_TARGET in text
  assert " pad(" not in text, "the forward should take value at its own columns"
