"""Calls past a launch limit (a CUDA grid dimension stops at 65535) run in
pieces along the cut axis; checked on the CPU kernels with a small limit, so
the piecing itself (slices, concatenation, summed parameter gradients) is
tested where CI runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import requires_cpu_backend, requires_gpu

import jaxdnn
from jaxdnn.attention import primitives as attention_primitives
from jaxdnn.norms import primitives as norm_primitives


def _custom_calls(fn, *args, target):
  hlo = jax.jit(fn).lower(*args).compile().as_text()
  return hlo.count(f'custom_call_target="{target}"')


@requires_cpu_backend
@pytest.mark.parametrize("bias_batch", [1, 5])
def test_attention_batch_in_pieces(monkeypatch, bias_batch):
  keys = jax.random.split(jax.random.key(2), 4)
  q = jax.random.normal(keys[0], (5, 9, 4, 16))
  k = jax.random.normal(keys[1], (5, 11, 2, 16))
  v = jax.random.normal(keys[2], (5, 11, 2, 16))
  bias = jax.random.normal(keys[3], (bias_batch, 4, 9, 11))
  mask = jnp.ones((1, 1, 9, 11), bool).at[..., 3].set(False)
  w = jnp.arange(16.0)

  def loss(q, k, v, b):
    out = jaxdnn.dot_product_attention(q, k, v, b, mask, is_causal=True, implementation="cpu")
    return jnp.sum(out * w)

  grad = jax.grad(loss, argnums=(0, 1, 2, 3))
  want = (loss(q, k, v, bias),) + grad(q, k, v, bias)
  monkeypatch.setitem(attention_primitives.SPLIT_LIMITS, "cpu", 2)
  got = (jax.jit(loss)(q, k, v, bias),) + jax.jit(grad)(q, k, v, bias)
  for g, x in zip(got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(x), rtol=1e-5, atol=1e-5)
  # Three pieces (2 + 2 + 1 batch rows) each way.
  assert _custom_calls(loss, q, k, v, bias, target="jaxdnn_attention_fwd") == 3
  assert _custom_calls(grad, q, k, v, bias, target="jaxdnn_attention_bwd") == 3


@requires_cpu_backend
def test_per_example_norm_gradients_in_pieces(monkeypatch):
  x = jax.random.normal(jax.random.key(0), (7, 3, 40))
  scale = jnp.linspace(0.5, 1.5, 40)
  bias = jnp.linspace(-1.0, 1.0, 40)

  def per_example(x, s, b):
    return jax.grad(
      lambda s, b: jnp.sum(jaxdnn.layer_norm(x, s, b, implementation="cpu") ** 2), argnums=(0, 1)
    )(s, b)

  grads = jax.vmap(per_example, in_axes=(0, None, None))
  want = grads(x, scale, bias)
  monkeypatch.setitem(norm_primitives.SPLIT_LIMITS, "cpu", 3)
  got = jax.jit(grads)(x, scale, bias)
  for g, w in zip(got, want):
    assert g.shape == (7, 40)
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)
  assert _custom_calls(grads, x, scale, bias, target="jaxdnn_norm_bwd") == 3


# ---- the real limits on CUDA (issue: vmap of 300 over batch 256; per-example
# norm gradients over 100,000 examples)


@requires_gpu
def test_gpu_vmap_folds_batch_past_65535():
  keys = jax.random.split(jax.random.key(4), 3)
  q = jax.random.normal(keys[0], (300, 256, 8, 2, 64), jnp.bfloat16)
  k = jax.random.normal(keys[1], (300, 256, 8, 2, 64), jnp.bfloat16)
  v = jax.random.normal(keys[2], (300, 256, 8, 2, 64), jnp.bfloat16)
  f = lambda impl: jax.jit(
    jax.vmap(
      lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
    )
  )
  got, want = f(None)(q, k, v), f("xla")(q, k, v)
  np.testing.assert_allclose(
    np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=2e-2, atol=2e-2
  )


@requires_gpu
def test_gpu_per_example_norm_gradients_over_100000_examples():
  x = jax.random.normal(jax.random.key(0), (100_000, 2, 64))
  scale = jnp.linspace(0.5, 1.5, 64)

  def per_example(impl):
    g = lambda x, s: jax.grad(lambda s: jnp.sum(jaxdnn.rms_norm(x, s, implementation=impl) ** 2))(s)
    return jax.jit(jax.vmap(g, in_axes=(0, None)))

  got, want = per_example(None)(x, scale), per_example("xla")(x, scale)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)
