"""The demos' optimizer: one Adam update (bias-corrected) over a pytree."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def adam(p, m, v, t, g, lr, b1=0.9, b2=0.99):
  """(p, m, v, t) after one Adam step with gradients g."""
  t = t + 1
  m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
  v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
  scale = lr * jnp.sqrt(1 - b2**t) / (1 - b1**t)
  p = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + 1e-8), p, m, v)
  return p, m, v, t
