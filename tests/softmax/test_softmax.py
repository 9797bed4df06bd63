"""softmax and log_softmax against jax.nn: axes (int, negative, tuple, None),
`where` (broadcast, rows with nothing kept), NaN and +inf, extreme logits,
empty arrays, and the errors that name their argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdnn

OPS = [(jaxdnn.softmax, jax.nn.softmax), (jaxdnn.log_softmax, jax.nn.log_softmax)]
IDS = ["softmax", "log_softmax"]


def rand(shape, dtype=jnp.float32, seed=0, scale=3.0):
  return (jax.random.normal(jax.random.key(seed), shape) * scale).astype(dtype)


def same(got, want, tol):
  got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
  assert got.shape == want.shape
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
  np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
  ok = np.isfinite(want)
  np.testing.assert_allclose(got[ok], want[ok], rtol=tol, atol=tol)


@pytest.mark.parametrize("ops", OPS, ids=IDS)
@pytest.mark.parametrize("axis", [-1, 0, 1, -2, (0, 2), (1, 2), None])
def test_axes_as_jax_nn(ops, axis):
  ours, theirs = ops
  x = rand((3, 5, 7))
  same(ours(x, axis=axis), theirs(x, axis=axis), 2e-6)
  g = lambda f: jax.grad(lambda x: jnp.sum(jnp.sin(f(x, axis=axis))))(x)
  same(g(ours), g(theirs), 2e-5)


@pytest.mark.parametrize("ops", OPS, ids=IDS)
def test_where_as_jax_nn(ops):
  ours, theirs = ops
  x = rand((4, 9))
  where = jax.random.bernoulli(jax.random.key(1), 0.6, (4, 9)).at[2].set(False)  # row 2: nothing
  same(ours(x, where=where), theirs(x, where=where), 2e-6)
  row = where[1]  # broadcast over rows
  same(ours(x, where=row), theirs(x, where=row), 2e-6)
  g = lambda f: jax.grad(lambda x: jnp.sum(jnp.where(where, f(x, where=where), 0) ** 2))(x)
  got, want = g(ours), g(theirs)
  same(got, want, 2e-5)
  assert np.all(np.asarray(got)[~np.asarray(where)] == 0)  # no gradient where dropped


@pytest.mark.parametrize("ops", OPS, ids=IDS)
@pytest.mark.parametrize("what", ["nan", "posinf", "neginf", "all_neginf"])
def test_nan_and_inf_as_the_reference(ops, what):
  ours, theirs = ops
  x = rand((3, 6))
  value = {"nan": jnp.nan, "posinf": jnp.inf, "neginf": -jnp.inf, "all_neginf": -jnp.inf}[what]
  x = x.at[1, 2].set(value) if what != "all_neginf" else x.at[1].set(value)
  want = ours(x, implementation="xla")
  same(ours(x), want, 2e-6)
  same(want, theirs(x), 2e-6)  # the reference is jax.nn's


@pytest.mark.parametrize("ops", OPS, ids=IDS)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32])
def test_extreme_logits(ops, dtype):
  ours, _ = ops
  x = rand((4, 300), dtype, scale=1e4 if dtype != jnp.float16 else 6e3)
  same(ours(x), ours(x, implementation="xla"), 2e-2)


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0,)])
def test_empty(shape):
  x = jnp.zeros(shape)
  for op, ref in OPS:
    assert op(x).shape == shape
    same(op(x), ref(x), 0)


def test_bfloat16_rows_sum_to_one():
  x = rand((16, 4096), jnp.bfloat16)
  s = np.asarray(jaxdnn.softmax(x), np.float32).sum(-1)
  np.testing.assert_allclose(s, 1.0, atol=2e-2)


def test_errors_name_the_argument():
  x = rand((2, 3))
  with pytest.raises(TypeError, match="x must be an array"):
    jaxdnn.softmax([1.0, 2.0])
  with pytest.raises(TypeError, match="x must be float"):
    jaxdnn.softmax(jnp.ones((2, 3), jnp.int32))
  with pytest.raises(ValueError, match="axis 2 is out of range"):
    jaxdnn.softmax(x, axis=2)
  with pytest.raises(TypeError, match="axis must be an int"):
    jaxdnn.log_softmax(x, axis=1.0)
  with pytest.raises(ValueError, match="axis repeats"):
    jaxdnn.softmax(x, axis=(1, -1))
  with pytest.raises(ValueError, match="at least one axis"):
    jaxdnn.softmax(jnp.float32(1.0))
  with pytest.raises(TypeError, match="where must be boolean"):
    jaxdnn.softmax(x, where=jnp.ones((2, 3)))
  with pytest.raises(ValueError, match="where of shape"):
    jaxdnn.softmax(x, where=jnp.ones((4, 3), bool))
  with pytest.raises(ValueError, match="implementation must be one of"):
    jaxdnn.softmax(x, implementation="triton")


def test_float64_runs_on_xla_with_one_warning():
  x = np.random.default_rng(0).standard_normal((3, 4))  # float64 numpy: x64 is off, so float32
  with jax.enable_x64(True):
    x64 = jnp.asarray(x, jnp.float64)
    with pytest.warns(UserWarning, match="float64"):
      y = jaxdnn.softmax(x64)
    assert y.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(y), np.asarray(jax.nn.softmax(x64)), rtol=1e-12)
