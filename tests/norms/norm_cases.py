"""Shared inputs and tolerances for the norm tests."""

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn

OPS = {"layer": jaxdnn.layer_norm, "rms": jaxdnn.rms_norm}
DTYPES = [jnp.float32, jnp.bfloat16, jnp.float16]
# Last dims 1, 3, 1000, 4097 (odd, scalar path), 64/4096 (vector path); a
# single row; 1-D; three leading dims.
SHAPES = [(5, 1), (4, 3), (7, 1000), (3, 4097), (1, 4096), (64,), (2, 3, 4, 64), (9, 256)]

_counter = [0]


def key():
  _counter[0] += 1
  return jax.random.key(1000 + _counter[0] + np.random.randint(1 << 20))


def rand(shape, dtype=jnp.float32, scale=1.0, offset=0.0):
  return (jax.random.normal(key(), shape, jnp.float32) * scale + offset).astype(dtype)


def tol(dtype):
  return {jnp.float32: 2e-5, jnp.bfloat16: 2e-2, jnp.float16: 4e-3}[jnp.dtype(dtype).type]


def grad_tol(dtype):
  return {jnp.float32: 1e-4, jnp.bfloat16: 5e-2, jnp.float16: 1e-2}[jnp.dtype(dtype).type]


def assert_close(a, b, rtol, atol=None):
  a = np.asarray(jnp.asarray(a, jnp.float32))
  b = np.asarray(jnp.asarray(b, jnp.float32))
  assert a.shape == b.shape, (a.shape, b.shape)
  scale = max(1.0, float(np.max(np.abs(b))) if b.size else 1.0)
  np.testing.assert_allclose(a, b, rtol=rtol, atol=(atol if atol is not None else rtol * scale))


def call(kind, x, scale=None, bias=None, **kw):
  if kind == "layer":
    return jaxdnn.layer_norm(x, scale, bias, **kw)
  return jaxdnn.rms_norm(x, scale, **kw)


def params(kind, dim):
  scale = rand((dim,), offset=1.0, scale=0.3)
  bias = rand((dim,), scale=0.3) if kind == "layer" else None
  return scale, bias
