"""batch_norm under the conformance checks of tests/conformance.py, and
beyond: training and inference against the oracle and Flax's BatchNorm,
the running statistics, a large offset, statistics synchronized over 4 CPU
devices with one collective each way, and errors."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import ConformanceSuite, OpSpec, Sharded, assert_close, normal
from jax.sharding import PartitionSpec as P
from test_conformance import grad_tol, tol

import jaxdnn


def bn_train(x, r, scale, bias, implementation=None):
  c = x.shape[-1]
  # numpy constants: jnp.linspace rounds differently under jit and eagerly.
  rm = np.linspace(-0.5, 0.5, c, dtype=np.float32)
  rv = np.linspace(0.8, 1.2, c, dtype=np.float32)
  return jaxdnn.batch_norm(
    x,
    scale,
    bias,
    rm,
    rv,
    use_running_average=False,
    activation="relu",
    residual=r,
    implementation=implementation,
  )


def make(rng, shape, dtype):
  x = normal(rng, shape, dtype, scale=2.0, offset=0.5)
  r = normal(rng, shape, dtype)
  return x, r, normal(rng, shape[-1:], offset=1.0, scale=0.3), normal(rng, shape[-1:])


class TestBatchNormReluResidual(ConformanceSuite):
  spec = OpSpec(
    name="batch_norm(relu, residual)",
    fn=bn_train,
    make_inputs=make,
    shapes=[(4, 5, 8), (3, 4, 5, 12), (2, 3, 2, 2, 6), (16, 3), (2, 7, 7, 32)],
    grad_shapes=[(4, 5, 8), (3, 4, 5, 12)],
    tol=tol,
    grad_tol=grad_tol,
    fwd_target="jaxdnn_batch_norm_stats",
    bwd_target="jaxdnn_batch_norm_bwd_apply",
    small_shape=(3, 4, 4, 8),
    check_grads_shape=(4, 3, 4),
    data_argnums=(0, 1),
    sharded=Sharded(
      mesh_shape=(4,),
      axis_names=("data",),
      shape=(8, 4, 4, 8),
      in_specs=(P("data"), P("data"), P(), P()),
      out_specs=(P("data"), P(), P()),
      bwd_all_reduce=True,
      fwd_all_reduce=True,
    ),
  )


@pytest.fixture
def rng(request):
  return np.random.default_rng(abs(hash(request.node.nodeid)) % 2**32)


def test_matches_flax_batch_norm(rng):
  nn = pytest.importorskip("flax.linen")
  x = normal(rng, (8, 5, 5, 16), scale=2.0, offset=1.0)
  layer = nn.BatchNorm(
    use_running_average=False, momentum=0.9, epsilon=1e-5, use_fast_variance=False
  )
  variables = layer.init(jax.random.key(0), x)
  want, updates = layer.apply(variables, x, mutable=["batch_stats"])
  p, st = variables["params"], variables["batch_stats"]
  y, rm, rv = jaxdnn.batch_norm(
    x, p["scale"], p["bias"], st["mean"], st["var"], use_running_average=False, momentum=0.9
  )
  assert_close(y, want, 2e-5)
  assert_close(rm, updates["batch_stats"]["mean"], 1e-6)
  assert_close(rv, updates["batch_stats"]["var"], 1e-6)
  inference = nn.BatchNorm(use_running_average=True, epsilon=1e-5)
  want = inference.apply({"params": p, "batch_stats": updates["batch_stats"]}, x)
  got, rm2, _ = jaxdnn.batch_norm(x, p["scale"], p["bias"], rm, rv, use_running_average=True)
  assert_close(got, want, 2e-5)
  assert rm2 is rm


def test_large_offset_has_no_cancellation(rng):
  """The statistics are shifted sums about the running mean: exact once the
  running mean tracks the batch's (a fresh running mean of 0 under a 1e4
  offset is as inexact as Flax's one-pass variance: docs/perf/cnn_norms.md)."""
  x = 1e4 + normal(rng, (256, 4))
  want = np.asarray(x, np.float64)
  want = (want - want.mean(0)) / np.sqrt(want.var(0) + 1e-5)
  y, _, _ = jaxdnn.batch_norm(x, running_mean=jnp.full(4, 1e4 + 0.3), use_running_average=False)
  # float32 holds 1e4 to about 1e-3: the mean itself is that far off.
  np.testing.assert_allclose(np.asarray(y), want, atol=2e-3)


def test_synchronized_over_devices_with_one_collective_each_way(rng):
  if len(jax.devices()) < 4:
    pytest.skip("needs 4 devices")
  mesh = jax.make_mesh((4,), ("data",))
  x = normal(rng, (16, 3, 3, 8), scale=2.0, offset=1.0)
  s, b = 1 + 0.1 * normal(rng, (8,)), normal(rng, (8,))

  def local(x, s, b, impl):
    y, rm, rv = jaxdnn.batch_norm(
      x, s, b, use_running_average=False, axis_name="data", activation="relu", implementation=impl
    )
    return y, rm, rv

  def sharded(impl):
    return jax.jit(
      jax.shard_map(
        functools.partial(local, impl=impl),
        mesh=mesh,
        in_specs=(P("data"), P(), P()),
        out_specs=(P("data"), P(), P()),
        check_vma=False,
      )
    )

  whole = jaxdnn.batch_norm(x, s, b, use_running_average=False, activation="relu")
  x0, x = x, jax.device_put(x, jax.NamedSharding(mesh, P("data")))
  got = sharded(None)(x, s, b)
  for a, w in zip(got, whole):
    assert_close(a, w, 2e-5)
  text = sharded(None).lower(x, s, b).compile().as_text()
  assert text.count("all-reduce(") + text.count("all-reduce-start(") == 1, "one all-reduce forward"

  def loss(impl):
    return lambda x, s, b: jnp.sum(jnp.sin(sharded(impl)(x, s, b)[0]))

  with jax.set_mesh(mesh):
    gx = jax.jit(jax.grad(loss(None), (0,)))(x, s, b)[0]
  want = jax.grad(
    lambda x: jnp.sum(
      jnp.sin(jaxdnn.batch_norm(x, s, b, use_running_average=False, activation="relu")[0])
    )
  )(x0)
  assert_close(gx, want, 5e-5)


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("with_residual", [True, False])
@pytest.mark.parametrize("c", [16, 12])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_relu_sign_bits_backward_matches_oracle(rng, train, with_residual, c, dtype):
  """With ReLU, channels a multiple of 8 and a residual (or in inference),
  the forward for the gradient writes z > 0 as bits and the backward reads
  them instead of the residual (and, in inference, x): the gradients match
  the oracle, NaN and ties at 0 included, and the bits are a uint8 result
  of the forward's custom call exactly when they should be."""
  x = normal(rng, (5, 3, 4, c), dtype, scale=2.0, offset=0.5)
  x = x.at[0, 0, 0, 0].set(jnp.nan).at[1, 1, 1, :].set(0.0)
  r = normal(rng, x.shape, dtype) if with_residual else None
  s, b = 1 + 0.1 * normal(rng, (c,)), 0.1 * normal(rng, (c,))
  rm = np.linspace(-0.5, 0.5, c, dtype=np.float32)
  rv = np.linspace(0.8, 1.2, c, dtype=np.float32)

  def f(impl):
    def loss(x, s, b, r):
      y = jaxdnn.batch_norm(
        x,
        s,
        b,
        rm,
        rv,
        use_running_average=not train,
        activation="relu",
        residual=r,
        implementation=impl,
      )[0]
      return jnp.nansum(y.astype(jnp.float32) * jnp.cos(jnp.arange(y.size).reshape(y.shape)))

    return jax.grad(loss, (0, 1, 2, 3) if with_residual else (0, 1, 2))

  args = (x, s, b, r)
  got, want = jax.jit(f(None))(*args), f("xla")(*args)
  for g, w in zip(got, want):
    assert_close(g, w, grad_tol(dtype) if train else tol(dtype))
  text = jax.jit(f(None)).lower(*args).as_text()
  bits = c % 8 == 0 and (with_residual or not train)
  assert ("xui8>" in text or "xi8>" in text) == bits, "sign bits where (and only where) they pay"


@pytest.mark.parametrize(
  "kw, error, match",
  [
    (dict(use_running_average=None), TypeError, "use_running_average"),
    (dict(use_running_average=False, momentum=1.5), ValueError, "momentum"),
    (dict(use_running_average=False, epsilon=0.0), ValueError, "epsilon"),
    (dict(use_running_average=False, scale=jnp.ones(3)), ValueError, "scale"),
    (dict(use_running_average=False, running_var=jnp.ones(5)), ValueError, "running_var"),
    (dict(use_running_average=False, residual=jnp.ones(4)), ValueError, "residual"),
    (dict(use_running_average=False, activation="swish"), ValueError, "activation"),
  ],
)
def test_errors_name_the_argument(kw, error, match):
  with pytest.raises(error, match=match):
    jaxdnn.batch_norm(jnp.ones((2, 3, 4)), **kw)


@pytest.mark.skipif(not jaxdnn.has_cuda_kernels(), reason="built without the CUDA extension")
def test_plan_sizes_the_column_sums_workspace():
  from jaxdnn import _extension

  q = lambda rows, channels, itemsize=2: _extension.plan_query(
    "batch_norm_partials", rows=rows, channels=channels, itemsize=itemsize
  )
  assert q(32768, 256) == 1024  # one column block: chunks of 32 rows
  assert q(128 * 56 * 56, 64) == 1056  # one wave of 1056 blocks
  assert q(5, 3, 4) == 1
