"""Plain-JAX bias_act and glu: the "xla" implementation and the test oracle.
Evaluated in float32 (float64 for float64) and rounded once to the input's
dtype, as the kernels do; gradients are JAX's of these definitions."""

from __future__ import annotations

import jax.numpy as jnp

from jaxdnn.activations import kinds


def _acc(dtype):
  return jnp.float64 if dtype == jnp.float64 else jnp.float32


def bias_act(x, bias, code, param):
  acc = _acc(x.dtype)
  z = x.astype(acc)
  if bias is not None:
    z = z + bias.astype(acc)
  return kinds.function(code, param)(z).astype(x.dtype)


def glu(value, gate, code, param):
  acc = _acc(value.dtype)
  out = value.astype(acc) * kinds.function(code, param)(gate.astype(acc))
  return out.astype(value.dtype)
