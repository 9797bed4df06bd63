"""group_norm and instance_norm beyond the conformance base: Flax
equivalence, the statistics' edge cases (one entry a group, constant
channels, a large offset), NaN, per-example parameters under vmap, and
errors that name the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import assert_close, normal

import jaxdnn


@pytest.fixture
def rng(request):
  return np.random.default_rng(abs(hash(request.node.nodeid)) % 2**32)


def test_matches_flax_group_norm(rng):
  nn = pytest.importorskip("flax.linen")
  x = normal(rng, (2, 6, 5, 32), scale=2.0, offset=1.0)
  layer = nn.GroupNorm(num_groups=8, epsilon=1e-5, use_fast_variance=False)
  params = layer.init(jax.random.key(0), x)
  s = 1 + 0.1 * normal(rng, (32,))
  b = 0.1 * normal(rng, (32,))
  params = {"params": {"scale": s, "bias": b}}
  assert_close(jaxdnn.group_norm(x, s, b, num_groups=8), layer.apply(params, x), 1e-5)


def test_matches_flax_instance_norm(rng):
  nn = pytest.importorskip("flax.linen")
  x = normal(rng, (3, 9, 7), scale=2.0)
  layer = nn.InstanceNorm(epsilon=1e-5, use_fast_variance=False)
  params = layer.init(jax.random.key(0), x)
  assert_close(jaxdnn.instance_norm(x), layer.apply(params, x), 1e-5)


def test_statistics_edges(rng):
  # One entry a group: var 0, the output is the bias.
  x = normal(rng, (2, 1, 4))
  b = normal(rng, (4,))
  np.testing.assert_allclose(
    jaxdnn.instance_norm(x, bias=b), jnp.broadcast_to(b, x.shape), atol=1e-6
  )
  # A constant channel group: finite, the bias.
  x = jnp.full((2, 5, 4), 3.0)
  np.testing.assert_allclose(
    jaxdnn.group_norm(x, bias=b, num_groups=2), jnp.broadcast_to(b, x.shape), atol=1e-6
  )
  # A large offset: float32 statistics without cancellation.
  x = 1e4 + normal(rng, (2, 64, 8))
  want = np.asarray(x, np.float64).reshape(2, 64, 2, 4)
  want = (want - want.mean((1, 3), keepdims=True)) / np.sqrt(want.var((1, 3), keepdims=True) + 1e-5)
  got = jaxdnn.group_norm(x, num_groups=2)
  np.testing.assert_allclose(np.asarray(got), want.reshape(2, 64, 8), atol=2e-3)


def test_nan_stays_in_its_group(rng):
  x = normal(rng, (2, 5, 8)).at[0, 1, 0].set(jnp.nan)
  y = np.asarray(jaxdnn.group_norm(x, num_groups=2))
  assert np.isnan(y[0, :, :4]).all()
  assert np.isfinite(y[0, :, 4:]).all() and np.isfinite(y[1]).all()


def test_per_example_parameters_under_vmap(rng):
  x = normal(rng, (3, 2, 5, 8))
  s = 1 + 0.1 * normal(rng, (3, 8))
  b = normal(rng, (3, 8))
  f = lambda impl: jax.vmap(
    lambda x, s, b: jaxdnn.group_norm(x, s, b, num_groups=4, activation="silu", implementation=impl)
  )
  assert_close(f(None)(x, s, b), f("xla")(x, s, b), 2e-5)
  g = lambda impl: jax.grad(lambda s, b: jnp.sum(f(impl)(x, s, b) ** 2), (0, 1))(s, b)
  for a, r in zip(g(None), g("xla")):
    assert_close(a, r, 5e-5)


def test_parameter_gradient_is_deterministic(rng):
  x = normal(rng, (16, 8, 8, 32), jnp.bfloat16)
  s = jnp.ones(32)
  g = jax.jit(
    jax.grad(lambda s: jnp.sum(jaxdnn.group_norm(x, s, num_groups=8, activation="silu") ** 2))
  )
  first = np.asarray(g(s))
  for _ in range(2):
    np.testing.assert_array_equal(np.asarray(g(s)), first)


@pytest.mark.parametrize(
  "kw, error, match",
  [
    (dict(num_groups=3), ValueError, "num_groups"),
    (dict(num_groups=0), ValueError, "num_groups"),
    (dict(num_groups=2.0), ValueError, "num_groups"),
    (dict(num_groups=2, epsilon=0.0), ValueError, "epsilon"),
    (dict(num_groups=2, epsilon=1e-50), ValueError, "epsilon"),
    (dict(num_groups=2, epsilon="a"), TypeError, "epsilon"),
    (dict(num_groups=2, activation="swish"), ValueError, "activation"),
    (dict(num_groups=2, residual=jnp.ones((2, 3))), ValueError, "residual"),
    (dict(num_groups=2, scale=jnp.ones(3)), ValueError, "scale"),
    (dict(num_groups=2, bias=jnp.ones((1, 4))), ValueError, "bias"),
    (dict(num_groups=2, implementation="tpu"), ValueError, "implementation"),
  ],
)
def test_errors_name_the_argument(kw, error, match):
  x = jnp.ones((2, 5, 4))
  with pytest.raises(error, match=match):
    jaxdnn.group_norm(x, **kw)


def test_x_errors():
  with pytest.raises(ValueError, match="x must be"):
    jaxdnn.instance_norm(jnp.ones(4))
  with pytest.raises(TypeError, match="x must be float"):
    jaxdnn.instance_norm(jnp.ones((2, 4), jnp.int32))


@pytest.mark.skipif(not jaxdnn.has_cuda_kernels(), reason="built without the CUDA extension")
def test_plan_sizes_the_cuda_workspace():
  from jaxdnn import _extension

  q = lambda samples, positions, channels, groups, itemsize=2: _extension.plan_query(
    "group_norm_workspace",
    samples=samples,
    positions=positions,
    channels=channels,
    groups=groups,
    itemsize=itemsize,
  )
  # 16 x 64 x 64 x 320, 32 groups: 2 column blocks x 16 samples, chunks of
  # 4096 positions for one wave (33 chunks), partials 16 x 33 x 2 x 320.
  assert q(16, 4096, 320, 32) == 16 * 33 * 2 * 320 + 16 * 32 * 2
  assert q(1, 1, 8, 2, 4) == 1 * 1 * 2 * 8 + 1 * 2 * 2
