"""What the softmax family's test files share: tolerances by dtype."""

import jax.numpy as jnp


def tol(dtype):
  """Outputs against the oracle (relative; the base scales atol)."""
  return {
    jnp.dtype(jnp.float32): 2e-6,
    jnp.dtype(jnp.bfloat16): 1e-2,
    jnp.dtype(jnp.float16): 2e-3,
  }[jnp.dtype(dtype)]


def grad_tol(dtype):
  return {
    jnp.dtype(jnp.float32): 2e-5,
    jnp.dtype(jnp.bfloat16): 3e-2,
    jnp.dtype(jnp.float16): 5e-3,
  }[jnp.dtype(dtype)]
