"""What the activations family's test files share: tolerances by dtype and
the activations with their arguments."""

import jax.numpy as jnp

# Every activation, with gelu both ways.
ACTIVATIONS = [
  ("identity", {}),
  ("relu", {}),
  ("relu6", {}),
  ("gelu", {"approximate": True}),
  ("gelu", {"approximate": False}),
  ("silu", {}),
  ("sigmoid", {}),
  ("tanh", {}),
  ("elu", {"alpha": 0.7}),
  ("softplus", {}),
  ("leaky_relu", {"negative_slope": 0.2}),
  ("squared_relu", {}),
]


def tol(dtype):
  """Outputs against the oracle: both round one float32 result once, so
  they differ by a last-place step at most."""
  return {
    jnp.dtype(jnp.float32): 1e-5,
    jnp.dtype(jnp.bfloat16): 1e-2,
    jnp.dtype(jnp.float16): 2e-3,
  }[jnp.dtype(dtype)]


def grad_tol(dtype):
  return {
    jnp.dtype(jnp.float32): 2e-5,
    jnp.dtype(jnp.bfloat16): 2e-2,
    jnp.dtype(jnp.float16): 4e-3,
  }[jnp.dtype(dtype)]
