"""Plain-JAX group norm: the "xla" implementation and the test oracle, by
the formulas of cpp/cnn_norms/problem.h, in float32 (float64 for float64)
and rounded once to x's dtype."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdnn.activations import kinds


def group_norm(x, scale, bias, residual, *, groups, epsilon, act, param):
  """x [N, ..., C]; scale, bias [C] or [N, C] (float32); residual like x or None."""
  acc = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
  n, c = x.shape[0], x.shape[-1]
  xf = x.astype(acc).reshape(n, -1, groups, c // groups)
  mean = jnp.mean(xf, axis=(1, 3), keepdims=True)
  var = jnp.mean(jnp.square(xf - mean), axis=(1, 3), keepdims=True)
  xhat = ((xf - mean) * jax.lax.rsqrt(var + epsilon)).reshape(n, -1, c)
  per_sample = lambda p: p.astype(acc).reshape((-1, 1, c))
  z = xhat * per_sample(scale) + per_sample(bias)
  if residual is not None:
    z = z + residual.astype(acc).reshape(z.shape)
  return kinds.function(act, param)(z).reshape(x.shape).astype(x.dtype)
