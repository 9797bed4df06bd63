"""Bad norm inputs fail at trace time with errors that name the argument
(implementation= errors: the conformance checks)."""

import jax
import jax.numpy as jnp
import pytest
from conftest import requires_cpu_backend

import jaxdnn


@pytest.mark.parametrize("op", [jaxdnn.layer_norm, jaxdnn.rms_norm])
def test_bad_inputs(op):
  x = jnp.ones((4, 8), jnp.float32)
  with pytest.raises(TypeError, match="x must be a floating-point"):
    op(jnp.ones((4, 8), jnp.int32))
  with pytest.raises(ValueError, match="scale must have shape \\(8,\\)"):
    op(x, jnp.ones((7,)))
  with pytest.raises(ValueError, match="epsilon must be > 0"):
    op(x, epsilon=0.0)
  with pytest.raises(ValueError, match="epsilon must be > 0"):
    op(x, epsilon=-1e-3)
  with pytest.raises(ValueError, match="last axis of x .* is empty"):
    op(jnp.ones((4, 0)))
  with pytest.raises(ValueError, match="residual must have x's shape"):
    op(x, residual=jnp.ones((4, 9)))
  with pytest.raises(TypeError, match="residual must be floating-point"):
    op(x, residual=jnp.ones((4, 8), jnp.int32))
  with pytest.raises(ValueError, match="implementation must be one of"):
    op(x, implementation="triton")
  with pytest.raises(ValueError, match="x must have at least one axis"):
    op(jnp.float32(1.0))


def test_bias_shape_named():
  with pytest.raises(ValueError, match="bias must have shape"):
    jaxdnn.layer_norm(jnp.ones((2, 8)), jnp.ones(8), jnp.ones((2, 8)))


@requires_cpu_backend
def test_kernel_refuses_parameters_of_another_dtype():
  # The call frame takes scale and bias in float32 or x's dtype, both the
  # same; anything else is an error naming the operand.
  from jaxdnn.norms.primitives import norm_forward

  x = jnp.ones((4, 8), jnp.bfloat16)
  fwd = lambda *a, kind: norm_forward.bind(
    *a, kind=kind, epsilon=1e-5, residual=False, implementation="cpu"
  )
  with pytest.raises(jax.errors.JaxRuntimeError, match="scale must be float32 or x's dtype"):
    jax.block_until_ready(fwd(x, jnp.ones(8, jnp.float16), kind="rms"))
  with pytest.raises(jax.errors.JaxRuntimeError, match="bias must have scale's dtype bfloat16"):
    jax.block_until_ready(fwd(x, jnp.ones(8, jnp.bfloat16), jnp.ones(8), kind="layer"))
