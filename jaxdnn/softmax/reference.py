"""Plain-JAX softmax and log-softmax over the last axis: the "xla"
implementation and the test oracle. jax.nn's formulas (the maximum and the
sum over the entries `where` keeps; dropped entries give 0, or -inf for the
log), evaluated in float32 (float64 for float64) and rounded once to x's dtype, as
the kernels do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def softmax(x, where=None, *, log=False):
  xf = x.astype(jnp.float64 if x.dtype == jnp.float64 else jnp.float32)
  m = jax.lax.stop_gradient(jnp.max(xf, -1, where=where, initial=-jnp.inf, keepdims=True))
  safe = xf if where is None else jnp.where(where, xf, -jnp.inf)
  shifted = safe - m
  total = jnp.sum(jnp.exp(shifted), -1, where=where, keepdims=True)
  if log:
    out = shifted - jnp.log(total)
    out = out if where is None else jnp.where(where, out, -jnp.inf)
  else:
    out = jnp.exp(shifted) / total
    out = out if where is None else jnp.where(where, out, 0.0)
  return out.astype(x.dtype)
