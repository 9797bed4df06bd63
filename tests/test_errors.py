"""Bad inputs fail at trace time with errors that name the argument."""

import jax
import jax.numpy as jnp
import pytest

import jaxdnn
from jaxdnn import _extension


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


def test_cuda_on_cpu_is_refused():
  if jax.default_backend() != "cpu":
    pytest.skip("CPU-only check")
  x = jnp.ones((4, 8))
  with pytest.raises(ValueError, match="implementation='cuda'|cannot run on platform 'cpu'"):
    jax.jit(lambda x: jaxdnn.layer_norm(x, implementation="cuda"))(x)


def test_old_jaxlib_is_refused(monkeypatch):
  monkeypatch.setattr(_extension._build_info, "BUILT_AGAINST_JAXLIB", "999.0.0")
  with pytest.raises(ImportError, match="built against jaxlib 999.0.0"):
    _extension._check_jaxlib()
  monkeypatch.setattr(_extension._build_info, "BUILT_AGAINST_JAXLIB", "0.1.0")
  _extension._check_jaxlib()
