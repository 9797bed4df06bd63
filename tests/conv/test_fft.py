"""algorithm="fft" (jaxdnn/conv/fft.py): XLA's real FFTs around jaxdnn's
per-frequency channel mixing (cpp/conv/fft/), on the CPU and CUDA kernels
alike. Against the oracle on 1-3D problems with every padding kind, groups,
kernel dilation and the epilogue; gradients; vmap over inputs (folded into
the batch) and weights (into the groups); the conformance checks (jit,
vmap, grad, checkpoint, sharding with one all-reduce); the default rule for
long windows; refusals; NaN's reach."""

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import (
  ConformanceSuite,
  OpSpec,
  Sharded,
  assert_close,
  custom_call_targets,
  normal,
)
from conftest import on_gpu
from jax.sharding import PartitionSpec as P
from jax.test_util import check_grads

import jaxdnn
from jaxdnn.conv import fft

TARGET = "jaxdnn_conv_fft_mix"


@pytest.fixture
def rng(request):
  return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# (x shape, w shape, conv kwargs): odd lengths, every padding kind, groups,
# kernel dilation, 1-3 spatial dims, a window longer than the input.
CASES = [
  ((2, 37, 6), (9, 6, 4), dict(padding="SAME", activation="relu")),
  ((3, 50, 4), (41, 4, 5), dict(padding="CAUSAL", activation="gelu")),
  ((2, 13, 3), (20, 3, 2), dict(padding="SAME")),
  ((2, 11, 13, 4), (5, 3, 2, 6), dict(feature_group_count=2, padding=((1, 3), (-1, 2)))),
  ((1, 9, 8, 5), (3, 4, 5, 7), dict(kernel_dilation=(2, 1), padding="VALID", activation="tanh")),
  ((2, 9, 8, 6), (3, 3, 3, 4), dict(feature_group_count=2, padding="CIRCULAR")),
  ((1, 5, 6, 7, 3), (2, 3, 2, 3, 5), dict(kernel_dilation=(1, 2, 1), padding="SAME")),
  ((2, 7, 8), (5, 1, 8), dict(feature_group_count=8, padding=2, activation="silu")),
]
TOL = {jnp.float32: 3e-5, jnp.bfloat16: 1.6e-2, jnp.float16: 2e-3}


def _args(rng, xs, ws, dtype):
  x = normal(rng, xs, dtype)
  w = normal(rng, ws, dtype, scale=1.0 / np.sqrt(np.prod(ws[:-1])))
  return x, w, normal(rng, ws[-1:], dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16], ids=str)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_the_oracle(rng, case, dtype):
  xs, ws, kw = CASES[case]
  x, w, b = _args(rng, xs, ws, dtype)
  conv = lambda x, w, b, r, **k: jaxdnn.conv(x, w, b, residual=r, alpha=0.75, beta=-1.5, **kw, **k)
  r = normal(rng, conv(x, w, b, None, implementation="xla").shape, dtype)
  f = jax.jit(lambda x, w, b, r: conv(x, w, b, r, algorithm="fft"))
  got = f(x, w, b, r)
  want = conv(x, w, b, r, implementation="xla")
  assert got.shape == want.shape and got.dtype == dtype
  assert_close(got, want, TOL[dtype])
  assert TARGET in custom_call_targets(f.lower(x, w, b, r).compile().as_text())


def test_float32_output_from_bfloat16(rng):
  x, w, b = _args(rng, (2, 40, 8), (33, 8, 8), jnp.bfloat16)
  conv = lambda **k: jaxdnn.conv(x, w, b, preferred_element_type=jnp.float32, **k)
  got = conv(algorithm="fft")
  assert got.dtype == jnp.float32
  assert_close(got, conv(implementation="xla"), 3e-5)


@pytest.mark.parametrize("case", [1, 2, 3, 4, 6])
def test_gradients(rng, case):
  xs, ws, kw = CASES[case]
  x, w, b = _args(rng, xs, ws, jnp.float32)
  f = lambda x, w, b: jnp.sum(jnp.sin(jaxdnn.conv(x, w, b, algorithm="fft", **kw)))
  # A wider step than the default: the FFT's float32 rounding (~1e-6 of the
  # sums, independent of the step) would dominate a 1e-4 difference quotient.
  check_grads(f, (x, w, b), order=1, modes=("rev",), atol=2e-2, rtol=2e-2, eps=1e-2)
  got = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(x, w, b)
  ref = lambda x, w, b: jnp.sum(jnp.sin(jaxdnn.conv(x, w, b, implementation="xla", **kw)))
  for a, e in zip(got, jax.grad(ref, argnums=(0, 1, 2))(x, w, b)):
    assert_close(a, e, 1e-4)


def test_residual_gradient_and_bfloat16_gradients(rng):
  x, w, b = _args(rng, (2, 30, 8), (17, 8, 8), jnp.bfloat16)
  r = normal(rng, (2, 30, 8), jnp.bfloat16)
  conv = lambda x, w, b, r, **k: jaxdnn.conv(
    x, w, b, residual=r, beta=0.5, activation="gelu", padding="SAME", **k
  )
  loss = lambda **k: lambda *a: jnp.sum(conv(*a, **k).astype(jnp.float32) ** 2)
  got = jax.grad(loss(algorithm="fft"), argnums=(0, 1, 2, 3))(x, w, b, r)
  want = jax.grad(loss(implementation="xla"), argnums=(0, 1, 2, 3))(x, w, b, r)
  for a, e in zip(got, want):
    assert a.dtype == e.dtype
    assert_close(a, e, 3e-2)


def test_vmap_over_inputs_and_weights(rng):
  x = normal(rng, (3, 2, 19, 4))
  w = normal(rng, (3, 7, 4, 5), scale=0.3)
  f = lambda **k: jax.vmap(lambda x, w: jaxdnn.conv(x, w, padding="SAME", **k))
  assert_close(jax.jit(f(algorithm="fft"))(x, w), f(implementation="xla")(x, w), 3e-5)
  g = lambda **k: jax.vmap(lambda x: jaxdnn.conv(x, w[0], padding="SAME", **k))
  assert_close(jax.jit(g(algorithm="fft"))(x), g(implementation="xla")(x), 3e-5)
  # Per-example weight gradients: the mixing's weight gradient under vmap.
  per_example = lambda **k: jax.vmap(
    jax.grad(lambda x, w: jnp.sum(jaxdnn.conv(x[None], w, padding="SAME", **k) ** 2), argnums=1),
    in_axes=(0, None),
  )
  xs = x[0]
  assert_close(
    per_example(algorithm="fft")(xs, w[0]), per_example(implementation="xla")(xs, w[0]), 1e-4
  )


def test_long_windows_default_to_fft(rng):
  taps = fft.DEFAULT_MIN_TAPS["cuda" if on_gpu() else "cpu"]
  x = normal(rng, (2, 300, 4))
  w = normal(rng, (taps, 4, 4), scale=0.06)
  plan = jaxdnn.conv_plan(x, w)
  assert plan["algorithm"] == "fft" and "FFT" in plan["config"]["kernel"], plan
  assert plan["config"]["fft_sizes"] == (fft.fast_size(300 + taps - 1),)
  f = jax.jit(lambda x, w: jaxdnn.conv(x, w))
  assert TARGET in custom_call_targets(f.lower(x, w).compile().as_text())
  assert_close(f(x, w), jaxdnn.conv(x, w, implementation="xla"), 3e-5)
  assert jaxdnn.conv_plan(x, w[: taps - 1])["algorithm"] != "fft"


def test_empty_batch(rng):
  w = normal(rng, (5, 3, 2))
  x = jnp.zeros((0, 20, 3))
  f = lambda x, w: jaxdnn.conv(x, w, algorithm="fft")
  assert f(x, w).shape == (0, 20, 2)
  dx, dw = jax.grad(lambda x, w: jnp.sum(f(x, w)), argnums=(0, 1))(x, w)
  assert dx.shape == x.shape and bool(jnp.all(dw == 0))


def test_the_default_takes_1d_windows_only(rng):
  x = normal(rng, (1, 20, 20, 2))
  w = normal(rng, (16, 16, 2, 2))
  assert jaxdnn.conv_plan(x, w)["algorithm"] != "fft"
  assert jaxdnn.conv_plan(x, w, algorithm="fft")["algorithm"] == "fft"


def test_fast_sizes():
  assert [fft.fast_size(n) for n in (1, 11, 13, 97, 1031, 9215)] == [1, 12, 14, 98, 1050, 9216]


def test_nan_spreads_over_its_sample_only(rng):
  """The FFT mixes every position of a sample: a NaN reaches all of that
  sample's outputs (the direct sum confines it to the window's reach, as
  cuDNN's FFT algorithms do not); other samples stay exact."""
  x = normal(rng, (2, 20, 3)).at[0, 5, 1].set(jnp.nan)
  w = normal(rng, (5, 3, 2))
  got = jaxdnn.conv(x, w, algorithm="fft")
  assert bool(jnp.all(jnp.isnan(got[0])))
  assert_close(got[1], jaxdnn.conv(x, w, implementation="xla")[1], 3e-5)


@pytest.mark.parametrize(
  "ws, kw",
  [((3, 4, 4), dict(strides=2)), ((3, 4, 4), dict(input_dilation=2, padding="VALID"))],
)
def test_refuses_what_it_does_not_serve(ws, kw):
  with pytest.raises(ValueError, match="algorithm='fft' serves stride-1"):
    jaxdnn.conv(jnp.ones((1, 16, 4)), jnp.ones(ws), algorithm="fft", **kw)
  with pytest.raises(ValueError, match="implementation='xla' runs none"):
    jaxdnn.conv(jnp.ones((1, 16, 4)), jnp.ones((3, 4, 4)), algorithm="fft", implementation="xla")


def _fft_conv(x, w, b, r, implementation=None):
  algorithm = None if implementation == "xla" else "fft"
  return jaxdnn.conv(
    x, w, b, residual=r, padding="SAME", beta=0.5, activation="silu",
    algorithm=algorithm, implementation=implementation,
  )  # fmt: skip


def _inputs(rng, shape, dtype):
  n, length, cin, cout = shape
  x = normal(rng, (n, length, cin), dtype)
  w = normal(rng, (11, cin, cout), dtype, scale=1.0 / np.sqrt(11 * cin))
  return x, w, normal(rng, (cout,), dtype, scale=0.5), normal(rng, (n, length, cout), dtype)


class TestFftConformance(ConformanceSuite):
  spec = OpSpec(
    name="conv 1D k11 FFT + residual + silu",
    fn=_fft_conv,
    make_inputs=_inputs,
    shapes=[(2, 29, 5, 6), (3, 16, 8, 4)],
    grad_shapes=[(2, 29, 5, 6)],
    tol=lambda d: 3e-5 if str(d) == "float32" else 1.6e-2,
    grad_tol=lambda d: 1e-4 if str(d) == "float32" else 3e-2,
    fwd_target=TARGET,
    bwd_target=TARGET,
    small_shape=(2, 12, 4, 4),
    check_grads_shape=(1, 9, 2, 3),
    data_argnums=(0, 3),
    oracle_in_float32=True,
    check_grads_tol=3e-2,
    sharded=Sharded(
      mesh_shape=(4,),
      axis_names=("data",),
      shape=(8, 12, 4, 4),
      in_specs=(P("data"), P(), P(), P("data")),
      out_specs=(P("data"),),
      bwd_all_reduce=True,
    ),
  )
