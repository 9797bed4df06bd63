"""Norm edges: NaN/Inf as the reference, a large offset in float32."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdnn

KERNELS = [None] + ([] if jax.default_backend() == "gpu" else ["cpu"])


def _same_nans_and_close(got, want, tol):
  got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
  np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
  finite = np.isfinite(want)
  np.testing.assert_allclose(got[finite], want[finite], rtol=tol, atol=tol)


@pytest.mark.parametrize("impl", KERNELS)
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_norm_nan_and_inf_propagate_as_the_reference(impl, op):
  x = jax.random.normal(jax.random.key(0), (4, 33)).at[1, 7].set(jnp.nan).at[2, 3].set(jnp.inf)
  scale = jnp.linspace(0.5, 1.5, 33)
  f = lambda implementation: lambda x, s: getattr(jaxdnn, op)(x, s, implementation=implementation)
  _same_nans_and_close(f(impl)(x, scale), f("xla")(x, scale), 1e-5)
  g = lambda implementation: jax.grad(
    lambda x, s: jnp.sum(f(implementation)(x, s) ** 2), argnums=(0, 1)
  )(x, scale)
  for got, want in zip(g(impl), g("xla")):
    _same_nans_and_close(got, want, 1e-4)


@pytest.mark.parametrize("width", [17, 1024, 4097])  # the CUDA scalar and vector kernels
def test_layer_norm_with_a_large_offset_keeps_float32_accuracy(width):
  x = np.random.default_rng(0).standard_normal((16, width)).astype(np.float32) + np.float32(1e6)
  z = x.astype(np.float64)
  want = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + 1e-5)
  for impl in KERNELS + ["xla"]:
    got = np.asarray(jaxdnn.layer_norm(jnp.asarray(x), implementation=impl), np.float64)
    assert np.max(np.abs(got - want)) < 1e-4, impl  # a float32 mean near 1e6 alone is 0.03 off
