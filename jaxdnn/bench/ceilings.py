"""The memory ceiling measured in the same run: an elementwise bf16 pass."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdnn.bench.timing import time_jax


def copy_bandwidth(nbytes=512 * 2**20) -> float:
  """Bytes/s of y = x + 1 over `nbytes` of bfloat16, counting read + write."""
  n = nbytes // 2
  x = jax.random.normal(jax.random.key(0), (n // 4096, 4096), jnp.bfloat16)
  f = jax.jit(lambda x: x + jnp.bfloat16(1))
  t = time_jax(f, x, repeats=20)
  return 2 * x.size * 2 / t
