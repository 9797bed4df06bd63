"""bias_act and glu beyond the conformance base: every activation on every
dtype and implementation against the oracle, jax.nn equivalence, NaN/Inf,
the bias gradient's determinism, per-example biases under vmap, split axes,
and errors that name the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from activation_cases import ACTIVATIONS, grad_tol, tol
from conformance import DTYPES, assert_close, normal
from conftest import on_gpu

import jaxdnn

IMPLS = [None, "cuda"] if on_gpu() else [None, "cpu"]
IDS = [
  a + ("" if not kw else "-" + "-".join(f"{k}={v}" for k, v in kw.items())) for a, kw in ACTIVATIONS
]


@pytest.fixture
def rng(request):
  return np.random.default_rng(abs(hash(request.node.nodeid)) % 2**32)


def _grads(fn, args, cot):
  return jax.jit(jax.grad(lambda *a: jnp.sum(fn(*a).astype(jnp.float32) * cot), range(len(args))))(
    *args
  )


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("act", ACTIVATIONS, ids=IDS)
def test_bias_act_every_activation(rng, act, dtype, impl):
  name, kw = act
  x = normal(rng, (37, 200), dtype, scale=3.0)
  b = normal(rng, (200,), scale=0.5)
  cot = normal(rng, (37, 200))
  fn = lambda i: lambda x, b: jaxdnn.bias_act(x, b, activation=name, implementation=i, **kw)
  assert_close(jax.jit(fn(impl))(x, b), fn("xla")(x, b), tol(dtype))
  for g, r in zip(_grads(fn(impl), (x, b), cot), _grads(fn("xla"), (x, b), cot)):
    assert_close(g, r, grad_tol(dtype))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("act", ACTIVATIONS, ids=IDS)
def test_glu_every_activation(rng, act, dtype, impl):
  name, kw = act
  x = normal(rng, (9, 2, 48), dtype, scale=2.0)
  cot = normal(rng, (9, 48))
  fn = lambda i: lambda x: jaxdnn.glu(x.reshape(9, 96), activation=name, implementation=i, **kw)
  assert_close(jax.jit(fn(impl))(x), fn("xla")(x), tol(dtype))
  assert_close(_grads(fn(impl), (x,), cot)[0], _grads(fn("xla"), (x,), cot)[0], grad_tol(dtype))


@pytest.mark.parametrize(
  "name, reference",
  [
    ("relu", jax.nn.relu),
    ("gelu", jax.nn.gelu),
    ("silu", jax.nn.silu),
    ("sigmoid", jax.nn.sigmoid),
    ("softplus", jax.nn.softplus),
    ("elu", jax.nn.elu),
    ("leaky_relu", jax.nn.leaky_relu),
  ],
)
def test_defaults_are_jax_nn(rng, name, reference):
  """Default arguments give jax.nn's function (gelu: approximate=True)."""
  x = normal(rng, (5, 64), scale=3.0)
  b = normal(rng, (64,))
  assert_close(jaxdnn.bias_act(x, b, activation=name), reference(x + b), 2e-6)


def test_glu_is_jax_nn_glu(rng):
  x = normal(rng, (4, 6, 10), scale=2.0)
  for axis in (-1, 0, 1):
    assert_close(jaxdnn.glu(x, axis=axis), jax.nn.glu(x, axis=axis), 2e-6)


def test_glu_pair_is_swiglu(rng):
  v, g = normal(rng, (7, 33)), normal(rng, (7, 33))
  assert_close(jaxdnn.glu(v, g, activation="silu"), v * jax.nn.silu(g), 2e-6)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
  "name", ["relu", "relu6", "gelu", "silu", "softplus", "elu", "squared_relu"]
)
def test_nan_and_inf_as_reference(name, impl):
  vals = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 6.0, 1e30, -1e30, 3.0, -2.0], np.float32)
  x = jnp.asarray(np.tile(vals, (3, 1)))
  fn = lambda i: lambda x: jaxdnn.bias_act(x, activation=name, implementation=i)
  got, want = fn(impl)(x), fn("xla")(x)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  assert_close(jnp.nan_to_num(got), jnp.nan_to_num(want), 1e-6)
  cot = jnp.ones_like(x)
  (g,), (r,) = _grads(fn(impl), (x,), cot), _grads(fn("xla"), (x,), cot)
  np.testing.assert_array_equal(np.isnan(g), np.isnan(r))
  assert_close(jnp.nan_to_num(g), jnp.nan_to_num(r), 1e-6)


def test_bias_gradient_is_deterministic(rng):
  x = normal(rng, (4096, 96), jnp.bfloat16, scale=2.0)
  b = normal(rng, (96,))
  g = jax.jit(jax.grad(lambda b: jnp.sum(jaxdnn.bias_act(x, b, activation="gelu") ** 2)))
  first = np.asarray(g(b))
  for _ in range(3):
    np.testing.assert_array_equal(np.asarray(g(b)), first)


def test_bias_dtype_kept(rng):
  x = normal(rng, (6, 16), jnp.bfloat16)
  for bdt in (jnp.bfloat16, jnp.float32):
    b = normal(rng, (16,), bdt)
    db = jax.grad(lambda b: jnp.sum(jaxdnn.bias_act(x, b, activation="relu").astype(jnp.float32)))(
      b
    )
    assert db.dtype == bdt


def test_vmap_per_example_bias(rng):
  """A batched bias (one per example) against the oracle, values and grads."""
  x = normal(rng, (3, 5, 24), scale=2.0)
  b = normal(rng, (3, 24))
  fn = lambda i: jax.vmap(lambda x, b: jaxdnn.bias_act(x, b, activation="silu", implementation=i))
  assert_close(fn(None)(x, b), fn("xla")(x, b), 1e-5)
  cot = normal(rng, (3, 5, 24))
  for g, r in zip(_grads(fn(None), (x, b), cot), _grads(fn("xla"), (x, b), cot)):
    assert_close(g, r, 2e-5)


def test_scalar_and_empty(rng):
  s = jnp.float32(-0.5)
  # 2e-5: the CUDA build computes exp and tanh with fast-math approximations.
  assert_close(jaxdnn.bias_act(s, activation="elu"), jax.nn.elu(s), 2e-5)
  assert_close(jaxdnn.glu(s, s * 2, activation="tanh"), s * jnp.tanh(2 * s), 2e-5)
  e = jnp.zeros((0, 8))
  assert jaxdnn.bias_act(e, jnp.ones(8), activation="relu").shape == (0, 8)
  db = jax.grad(lambda b: jnp.sum(jaxdnn.bias_act(e, b, activation="relu")))(jnp.ones(8))
  np.testing.assert_array_equal(db, np.zeros(8))
  assert jaxdnn.glu(jnp.zeros((3, 0))).shape == (3, 0)


def test_long_rows_and_one_column(rng):
  for shape in [(2, 32000), (3, 1), (1, 128256)]:
    x = normal(rng, shape, jnp.bfloat16, scale=2.0)
    b = normal(rng, shape[-1:])
    assert_close(
      jaxdnn.bias_act(x, b, activation="gelu"),
      jaxdnn.bias_act(x, b, activation="gelu", implementation="xla"),
      1e-2,
    )


BA = jaxdnn.bias_act


@pytest.mark.parametrize(
  "call, error, match",
  [
    (lambda x: BA(x, activation="swish"), ValueError, "activation must be one of"),
    (lambda x: BA(x, activation=None), ValueError, "activation must be one of"),
    (
      lambda x: BA(x, jnp.ones(3), activation="relu"),
      ValueError,
      "bias must have shape",
    ),
    (
      lambda x: BA(x.astype(jnp.int32), activation="relu"),
      TypeError,
      "x must be float",
    ),
    (lambda x: BA([1.0], activation="relu"), TypeError, "x must be an array"),
    (lambda x: BA(x, activation="gelu", approximate="tanh"), TypeError, "approximate"),
    (
      lambda x: BA(x, activation="leaky_relu", negative_slope=float("nan")),
      ValueError,
      "negative_slope",
    ),
    (lambda x: BA(x, activation="elu", alpha=1e39), ValueError, "alpha"),
    (
      lambda x: BA(x, activation="relu", implementation="tpu"),
      ValueError,
      "implementation",
    ),
    (lambda x: jaxdnn.glu(x[:, :3]), ValueError, "even length"),
    (lambda x: jaxdnn.glu(x, axis=2), ValueError, "out of range"),
    (lambda x: jaxdnn.glu(x, axis=1.0), TypeError, "axis must be an int"),
    (lambda x: jaxdnn.glu(x, x[:, :2]), ValueError, "gate must have x's shape"),
    (lambda x: jaxdnn.glu(x, x.astype(jnp.bfloat16)), ValueError, "gate must have x's shape"),
  ],
)
def test_errors_name_the_argument(call, error, match):
  with pytest.raises(error, match=match):
    call(jnp.ones((4, 8), jnp.float32))


def test_float64_falls_back_with_a_warning():
  with jax.enable_x64(True):
    x = jnp.linspace(-2, 2, 16, dtype=jnp.float64).reshape(2, 8)
    with pytest.warns(UserWarning, match="float64"):
      y = jaxdnn.bias_act(x, activation="silu")
    assert y.dtype == jnp.float64
    assert_close(y, jax.nn.silu(x), 1e-12)


@pytest.mark.skipif(not jaxdnn.has_cuda_kernels(), reason="built without the CUDA extension")
def test_plan_sizes_the_bias_gradient_workspace():
  from jaxdnn import _extension

  q = lambda rows, cols, itemsize=2: _extension.plan_query(
    "bias_act_bwd_partials", rows=rows, cols=cols, itemsize=itemsize
  )
  assert q(32768, 4096) == 66  # one wave of 16 column blocks x 66 row chunks
  assert q(100, 768) == 4  # chunks of at least 32 rows
  assert q(7, 3, 4) == 1
