"""Convolution beyond the conformance base: the geometry sweep (1D-3D,
strides, both dilations, asymmetric and negative padding, groups and
depthwise, every activation, residual, alpha and beta) against
lax.conv_general_dilated, forward and all gradients, on every dtype;
Flax's nn.Conv and nn.ConvTranspose; vmap over inputs and over weights;
float32 outputs from 16-bit inputs; NaN; errors that name the argument."""

import zlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import assert_close, custom_call_targets, normal
from conftest import on_gpu

import jaxdnn


@pytest.fixture
def rng(request):
  # crc32, not hash(): str hashes change per process, so a failing draw could not be rerun.
  return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# (x shape, w shape, conv kwargs)
CASES = [
  ((2, 9, 8, 6), (3, 3, 6, 5), dict(activation="relu")),
  ((2, 13, 13, 4), (7, 7, 4, 3), dict(strides=3, padding="VALID")),
  ((2, 9, 8, 6), (3, 3, 3, 4), dict(feature_group_count=2, strides=2, activation="gelu")),
  ((1, 11, 10, 64), (3, 3, 2, 64), dict(feature_group_count=32, activation="silu")),
  ((2, 9, 8, 6), (3, 3, 1, 6), dict(feature_group_count=6, kernel_dilation=4, activation="relu6")),
  ((2, 9, 8, 6), (3, 3, 1, 12), dict(feature_group_count=6, kernel_dilation=(2, 3))),
  (
    (2, 9, 8, 6),
    (3, 2, 6, 5),
    dict(padding=((1, 0), (2, 1)), input_dilation=(2, 1), strides=(1, 3), activation="sigmoid"),
  ),
  ((2, 10, 9, 3), (3, 3, 3, 4), dict(padding=((-1, 2), (0, -1)), activation="tanh")),
  ((2, 17, 3), (5, 3, 4), dict(padding="CAUSAL", kernel_dilation=3, activation="elu")),
  ((3, 31, 5), (4, 5, 2), dict(strides=2, padding=3, activation="leaky_relu")),
  ((1, 5, 6, 7, 3), (3, 2, 3, 3, 4), dict(strides=(2, 1, 2), activation="softplus")),
  ((1, 4, 5, 6, 4), (2, 3, 2, 2, 4), dict(feature_group_count=2, kernel_dilation=(1, 2, 2))),
  ((2, 9, 8, 6), (3, 3, 6, 5), dict(padding="CIRCULAR")),
  ((2, 9, 8, 6), (3, 4, 6, 5), dict(padding="REFLECT", activation="squared_relu")),
  ((2, 1, 1, 3), (1, 1, 3, 2), dict()),
]


def _args(rng, xs, ws, dtype, bias=True, residual_shape=None):
  x = normal(rng, xs, dtype)
  w = normal(rng, ws, dtype, scale=1.0 / np.sqrt(np.prod(ws[:-1])))
  b = normal(rng, ws[-1:], dtype) if bias else None
  r = None if residual_shape is None else normal(rng, residual_shape, dtype)
  return x, w, b, r


TOL = {jnp.float32: 2e-5, jnp.bfloat16: 1.6e-2, jnp.float16: 2e-3}
GRAD_TOL = {jnp.float32: 5e-5, jnp.bfloat16: 4e-2, jnp.float16: 1e-2}


def _loss(impl, kw):
  """A loss linear in y (a fixed random projection), so the cotangent the
  16-bit kernel sees is the oracle's exactly."""

  def f(x, w, b, r):
    y = jaxdnn.conv(x, w, b, residual=r, implementation=impl, **kw).astype(jnp.float32)
    return jnp.sum(y * jnp.cos(jnp.arange(y.size, dtype=jnp.float32).reshape(y.shape)))

  return f


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16], ids=str)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_lax(rng, case, dtype):
  xs, ws, kw = CASES[case]
  x, w, b, _ = _args(rng, xs, ws, dtype)
  got = jax.jit(lambda x, w, b: jaxdnn.conv(x, w, b, **kw))(x, w, b)
  want = jaxdnn.conv(x, w, b, implementation="xla", **kw)
  assert got.shape == want.shape and got.dtype == dtype
  assert_close(got, want, TOL[dtype])
  # Gradients of every operand, with a residual of the output's shape.
  r = normal(rng, got.shape, dtype)
  kw = dict(kw, alpha=0.75, beta=-1.5)
  wide = lambda a: a.astype(jnp.float32)
  g = jax.jit(jax.grad(_loss(None, kw), argnums=(0, 1, 2, 3)))(x, w, b, r)
  want = jax.grad(_loss("xla", kw), argnums=(0, 1, 2, 3))(wide(x), wide(w), wide(b), wide(r))
  for got_g, want_g, a in zip(g, want, (x, w, b, r)):
    assert got_g.dtype == a.dtype
    assert_close(got_g, want_g, GRAD_TOL[dtype])


@pytest.mark.skipif(
  on_gpu(), reason="float32 runs on XLA on a GPU (test_conv_cuda.py checks the kernel)"
)
def test_custom_calls_in_hlo(rng):
  x, w, b, _ = _args(rng, (2, 6, 6, 4), (3, 3, 4, 4), jnp.float32)
  f = lambda x, w, b: jnp.sum(jaxdnn.conv(x, w, b, activation="gelu") ** 2)
  assert "jaxdnn_conv_fwd" in custom_call_targets(jax.jit(f).lower(x, w, b).compile().as_text())
  text = jax.jit(jax.grad(f, argnums=(0, 1, 2))).lower(x, w, b).compile().as_text()
  assert {"jaxdnn_conv_fwd", "jaxdnn_conv_dgrad", "jaxdnn_conv_wgrad"} <= custom_call_targets(text)
  # Only the weight gradient asked for: the data gradient's call is gone.
  text = jax.jit(jax.grad(f, argnums=1)).lower(x, w, b).compile().as_text()
  assert "jaxdnn_conv_dgrad" not in custom_call_targets(text)


@pytest.mark.parametrize("padding", ["SAME", "VALID", ((2, 1), (0, 2)), "CIRCULAR", 1])
def test_matches_flax_conv(rng, padding):
  x = normal(rng, (2, 9, 10, 4))
  layer = nn.Conv(6, (3, 2), strides=(2, 1), padding=padding, kernel_dilation=(1, 2))
  params = layer.init(jax.random.key(0), x)["params"]
  want = layer.apply({"params": params}, x)
  got = jaxdnn.conv(
    x,
    params["kernel"],
    params["bias"],
    strides=(2, 1),
    padding=padding,
    kernel_dilation=(1, 2),
  )
  assert_close(got, want, 2e-5)


@pytest.mark.parametrize("transpose_kernel", [False, True])
@pytest.mark.parametrize("padding", ["SAME", "VALID", ((1, 2), (2, 0))])
def test_matches_flax_conv_transpose(rng, padding, transpose_kernel):
  x = normal(rng, (2, 5, 6, 4))
  layer = nn.ConvTranspose(
    3, (4, 3), strides=(2, 3), padding=padding, transpose_kernel=transpose_kernel
  )
  params = layer.init(jax.random.key(0), x)["params"]
  want = layer.apply({"params": params}, x)
  f = lambda x, k, b: jaxdnn.conv_transpose(
    x, k, b, strides=(2, 3), padding=padding, transpose_kernel=transpose_kernel
  )
  got = jax.jit(f)(x, params["kernel"], params["bias"])
  assert_close(got, want, 2e-5)
  g = jax.grad(lambda *a: jnp.sum(jnp.sin(f(*a))), argnums=(0, 1, 2))(
    x, params["kernel"], params["bias"]
  )
  r = jax.grad(
    lambda x, k, b: jnp.sum(jnp.sin(layer.apply({"params": {"kernel": k, "bias": b}}, x))),
    argnums=(0, 1, 2),
  )(x, params["kernel"], params["bias"])
  for a, c in zip(g, r):
    assert_close(a, c, 5e-5)


def test_conv_transpose_3d_matches_lax(rng):
  x = normal(rng, (1, 3, 4, 5, 3))
  w = normal(rng, (3, 3, 3, 3, 2))
  got = jaxdnn.conv_transpose(x, w, strides=2, padding="SAME", activation="relu")
  want = jax.nn.relu(
    jax.lax.conv_transpose(
      x, w, (2, 2, 2), "SAME", dimension_numbers=("NDHWC", "DHWIO", "NDHWC"), precision="highest"
    )
  )
  assert_close(got, want, 2e-5)


def test_epilogue_semantics(rng):
  x, w, b, _ = _args(rng, (2, 7, 7, 3), (3, 3, 3, 5), jnp.float32)
  r = normal(rng, (2, 7, 7, 5))
  conv = jax.lax.conv_general_dilated(
    x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), precision="highest"
  )
  want = jax.nn.gelu(0.5 * conv + b + 2.0 * r, approximate=False)
  got = jaxdnn.conv(x, w, b, residual=r, alpha=0.5, beta=2.0, activation="gelu", approximate=False)
  assert_close(got, want, 2e-5)


def test_float32_output_from_bfloat16(rng):
  x, w, b, _ = _args(rng, (2, 8, 8, 16), (3, 3, 16, 8), jnp.bfloat16)
  got = jaxdnn.conv(x, w, b, preferred_element_type=jnp.float32)
  assert got.dtype == jnp.float32
  want = jaxdnn.conv(
    x.astype(jnp.float32), w.astype(jnp.float32), b.astype(jnp.float32), implementation="xla"
  )
  assert_close(got, want, 1e-5)
  g = jax.grad(lambda w: jnp.sum(jaxdnn.conv(x, w, b, preferred_element_type=jnp.float32)))(w)
  assert g.dtype == jnp.bfloat16


def test_vmap_over_inputs_and_weights(rng):
  x = normal(rng, (3, 2, 7, 6, 4))  # vmapped axis 0
  w = normal(rng, (3, 3, 3, 2, 6))  # per-index weights, 2 groups
  b = normal(rng, (3, 6))
  f = lambda impl: (
    lambda x, w, b: jaxdnn.conv(
      x, w, b, feature_group_count=2, activation="silu", implementation=impl
    )
  )
  for axes in [(0, None, None), (0, 0, 0), (None, 0, None), (1, 0, 0)]:
    xx = jnp.moveaxis(x, 0, 1) if axes[0] == 1 else x
    xx = xx[0] if axes[0] is None else xx
    ww = w if axes[1] == 0 else w[0]
    bb = b if axes[2] == 0 else b[0]
    got = jax.jit(jax.vmap(f(None), in_axes=axes))(xx, ww, bb)
    want = jax.vmap(f("xla"), in_axes=axes)(xx, ww, bb)
    assert_close(got, want, 2e-5)


def test_per_example_gradients(rng):
  x = normal(rng, (4, 6, 6, 3))
  w = normal(rng, (3, 3, 3, 5))
  b = normal(rng, (5,))

  def loss(impl):
    def f(w, b, x):
      y = jaxdnn.conv(x[None], w, b, strides=2, activation="tanh", implementation=impl)
      return jnp.sum(jnp.sin(y))

    return f

  got = jax.jit(jax.vmap(jax.grad(loss(None), argnums=(0, 1)), in_axes=(None, None, 0)))(w, b, x)
  want = jax.vmap(jax.grad(loss("xla"), argnums=(0, 1)), in_axes=(None, None, 0))(w, b, x)
  for a, c in zip(got, want):
    assert a.shape == c.shape
    assert_close(a, c, 5e-5)


def test_nan_and_inf_propagate_like_xla(rng):
  x, w, b, _ = _args(rng, (1, 6, 6, 2), (3, 3, 2, 3), jnp.float32)
  x = x.at[0, 2, 3, 1].set(jnp.nan).at[0, 5, 0, 0].set(jnp.inf)
  for act in (None, "relu", "gelu"):
    got = jaxdnn.conv(x, w, b, activation=act)
    want = jaxdnn.conv(x, w, b, activation=act, implementation="xla")
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(np.asarray(want))
    np.testing.assert_array_equal(finite, np.isfinite(np.asarray(got)))
    assert_close(jnp.where(finite, got, 0), jnp.where(finite, want, 0), 2e-5)


def test_float64_uses_xla_with_a_warning(rng):
  with jax.enable_x64(True):
    x = jnp.asarray(rng.standard_normal((1, 5, 5, 2)))
    w = jnp.asarray(rng.standard_normal((3, 3, 2, 2)))
    with pytest.warns(UserWarning, match="float64"):
      y = jaxdnn.conv(x, w)
    assert y.dtype == jnp.float64
    with pytest.raises(ValueError, match="float64"):
      jaxdnn.conv(x, w, implementation="cpu")


@pytest.mark.parametrize(
  "xs, ws, kw, match",
  [
    ((1, 8, 8, 6), (3, 3, 4, 4), dict(feature_group_count=2), "w's input channels"),
    ((1, 8, 8, 6), (3, 3, 2, 5), dict(feature_group_count=3), "output channels"),
    ((1, 8, 8, 5), (3, 3, 1, 4), dict(feature_group_count=2), "multiple of feature_group_count"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(feature_group_count=0), "feature_group_count"),
    ((1, 4, 4, 4), (5, 5, 4, 4), dict(padding="VALID"), "larger than the padded input"),
    ((1, 4, 4, 4), (3, 3, 4, 4), dict(kernel_dilation=3, padding="VALID"), "larger than"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(strides=0), "strides"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(strides=(1, -2)), "strides"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(kernel_dilation=(1, 0)), "kernel_dilation"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(input_dilation=2), "input_dilation"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(strides=(1, 1, 1)), "strides"),
    ((8, 4), (3, 4, 4), dict(), "x must be"),
    ((1, 8, 8, 4), (3, 4, 4), dict(), "w must be"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(padding="FULL"), "padding"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(padding=((1, 1),)), "padding"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(padding="CAUSAL"), "CAUSAL"),
    ((1, 2, 8, 4), (5, 3, 4, 4), dict(padding="REFLECT"), "REFLECT"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(activation="swish"), "activation"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(algorithm="fastest"), "algorithm"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(algorithm="fft", strides=2), "serves stride-1"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(algorithm="winograd", strides=2), "winograd"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(alpha=float("inf")), "alpha"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(beta=1e39), "beta"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(preferred_element_type=jnp.int32), "preferred_element_type"),
    ((1, 8, 8, 4), (3, 3, 4, 4), dict(implementation="tpu"), "implementation"),
  ],
)
def test_errors_name_the_argument(xs, ws, kw, match):
  with pytest.raises((ValueError, TypeError), match=match):
    jaxdnn.conv(jnp.ones(xs), jnp.ones(ws), **kw)


def test_operand_errors():
  x, w = jnp.ones((1, 6, 6, 4)), jnp.ones((3, 3, 4, 2))
  with pytest.raises(TypeError, match="same dtype"):
    jaxdnn.conv(x, w.astype(jnp.bfloat16))
  with pytest.raises(TypeError, match="x must be float32"):
    jaxdnn.conv(x.astype(jnp.int32), w)
  with pytest.raises(TypeError, match="x must be an array"):
    jaxdnn.conv([[1.0]], w)
  with pytest.raises(ValueError, match="bias must have shape"):
    jaxdnn.conv(x, w, jnp.ones((4,)))
  with pytest.raises(ValueError, match="residual must have"):
    jaxdnn.conv(x, w, residual=jnp.ones((1, 6, 6, 4)))
  with pytest.raises(ValueError, match="CIRCULAR"):
    jaxdnn.conv_transpose(x, w, strides=2, padding="CIRCULAR")
  with pytest.raises(TypeError, match="transpose_kernel"):
    jaxdnn.conv_transpose(x, w, transpose_kernel=1)


@pytest.mark.skipif(
  on_gpu(), reason="float32 depthwise runs on XLA on a GPU (the CUDA test covers 16-bit)"
)
@pytest.mark.parametrize(
  "kw",
  [
    dict(padding="SAME", kernel_dilation=2, activation="gelu"),
    dict(padding=((1, 2), (0, 1)), strides=2, activation="relu"),
    dict(padding=((2, 0), (3, 1)), strides=(2, 3), kernel_dilation=(1, 2)),
    dict(padding="VALID", strides=3, activation="silu"),
  ],
)
def test_depthwise_direct_data_gradient_is_a_flipped_forward(rng, kw):
  """api._depthwise_dgrad_geometry: with algorithm="direct", a depthwise
  convolution's data gradient runs as the forward primitive on the transposed
  problem (flipped window, strides as input dilation), with the activation's
  derivative, alpha, and the residual's gradient beta * dz; the gradients
  match the oracle's and the data-gradient primitive is not called."""
  c = 8
  x, w, b = normal(rng, (2, 11, 10, c)), normal(rng, (3, 3, 1, c)), normal(rng, (c,))
  y_shape = jaxdnn.conv(x, w, feature_group_count=c, implementation="xla", **kw).shape
  r = normal(rng, y_shape)
  common = dict(feature_group_count=c, residual=r, alpha=0.7, beta=1.5, **kw)

  def loss(impl):
    return lambda x, w, b, r: jnp.sum(
      jnp.sin(jaxdnn.conv(x, w, b, **dict(common, residual=r), **impl))
    )

  f = jax.grad(loss(dict(algorithm="direct")), argnums=(0, 1, 2, 3))
  got = jax.jit(f)(x, w, b, r)
  want = jax.grad(loss(dict(implementation="xla")), argnums=(0, 1, 2, 3))(x, w, b, r)
  for a, e in zip(got, want):
    assert_close(a, e, 5e-5)
  targets = custom_call_targets(jax.jit(f).lower(x, w, b, r).compile().as_text())
  assert "jaxdnn_conv_fwd" in targets and "jaxdnn_conv_dgrad" not in targets, targets


def test_algorithm_forcing_and_plan(rng):
  x = normal(rng, (2, 9, 8, 6))
  w = normal(rng, (3, 3, 1, 6))
  kw = dict(feature_group_count=6, kernel_dilation=2, activation="silu")
  want = jaxdnn.conv(x, w, implementation="xla", **kw)
  # On a GPU float32 runs on XLA, and a forced algorithm with no CUDA kernel is an error.
  for algorithm in (None,) if on_gpu() else (None, "direct", "implicit_gemm"):
    got = jax.jit(lambda x, w, a=algorithm: jaxdnn.conv(x, w, algorithm=a, **kw))(x, w)
    assert_close(got, want, 2e-5)
    g = jax.grad(lambda w, a=algorithm: jnp.sum(jnp.sin(jaxdnn.conv(x, w, algorithm=a, **kw))))(w)
    r = jax.grad(lambda w: jnp.sum(jnp.sin(jaxdnn.conv(x, w, implementation="xla", **kw))))(w)
    assert_close(g, r, 5e-5)
  if on_gpu():
    with pytest.raises(ValueError, match="cannot serve this call"):
      jaxdnn.conv(x, w, algorithm="direct", **kw)
  else:
    plan = jaxdnn.conv_plan(x, w, **kw)
    assert plan["implementation"] == "cpu" and plan["algorithm"] == "direct", plan
    plan = jaxdnn.conv_plan(x, w, algorithm="implicit_gemm", **kw)
    assert plan["algorithm"] == "implicit_gemm" and "asked for" in plan["reason"]
    dense = jax.ShapeDtypeStruct((2, 9, 8, 6), jnp.float32)
    plan = jaxdnn.conv_plan(dense, jax.ShapeDtypeStruct((3, 3, 6, 4), jnp.float32))
    assert plan["algorithm"] == "implicit_gemm" and plan["gradients"]
    with pytest.raises(ValueError, match="direct"):
      jaxdnn.conv(normal(rng, (1, 5, 5, 4)), normal(rng, (3, 3, 4, 4)), algorithm="direct")
  assert jaxdnn.conv_plan(x, w, implementation="xla", **kw)["implementation"] == "xla"
