"""algorithm="winograd": the CPU's F(4x4, 3x3) and F(2x2, 3x3) forwards
(cpp/conv/cpu/winograd.cc; the 4x4 tile where the output has 4 rows and 4
columns, so the cases below run both)
against the oracle on the problems it serves, with gradients (on the CPU's
implicit-GEMM kernels), vmap over weights (folded into groups), the custom
call in the HLO, and the refusal of problems it does not serve. On a GPU
the same cases run the CUDA forward (cpp/conv/sm80/winograd_fwd.cu:
F(2x2, 3x3) for 16-bit dtypes, the CPU's tile rule for float32), plus
GPU-only cases with the channel counts its vector and GEMM paths take."""

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import assert_close, custom_call_targets, normal
from conftest import on_gpu
from jax.test_util import check_grads

import jaxdnn


@pytest.fixture
def rng(request):
  return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# (x shape, w shape, conv kwargs): odd and even sizes (partial last tiles),
# every padding kind, groups, 3D with a depth window of 1, a 1x1 image.
CASES = [
  ((2, 9, 11, 5), (3, 3, 5, 7), dict(padding="SAME", activation="relu")),
  ((1, 4, 4, 3), (3, 3, 3, 4), dict(padding="VALID")),
  ((2, 7, 6, 4), (3, 3, 4, 17), dict(padding=((2, 0), (1, 3)), activation="gelu")),
  # Negative padding. Not (-1, 1) on one dim: XLA's CPU convolution (jax
  # 0.10.2) returns wrong values, even uninitialized memory, there (this
  # kernel and the implicit GEMM agree with a NumPy sum).
  ((2, 8, 8, 6), (3, 3, 6, 5), dict(padding=((-1, 2), (0, -1)), activation="tanh")),
  ((2, 3, 8, 7, 4), (1, 3, 3, 4, 6), dict(padding="SAME", activation="silu")),
  ((1, 1, 1, 3), (3, 3, 3, 2), dict(padding="SAME")),
  ((2, 9, 8, 6), (3, 3, 3, 4), dict(feature_group_count=2, padding="CIRCULAR")),
  ((1, 6, 5, 8), (3, 3, 1, 8), dict(feature_group_count=8, padding=1)),
]
TOL = {jnp.float32: 2e-5, jnp.bfloat16: 1.6e-2, jnp.float16: 2e-3}


def _args(rng, xs, ws, dtype):
  x = normal(rng, xs, dtype)
  w = normal(rng, ws, dtype, scale=1.0 / np.sqrt(np.prod(ws[:-1])))
  return x, w, normal(rng, ws[-1:], dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16], ids=str)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_the_oracle(rng, case, dtype):
  xs, ws, kw = CASES[case]
  x, w, b = _args(rng, xs, ws, dtype)
  r = None
  conv = lambda x, w, b, r, **k: jaxdnn.conv(x, w, b, residual=r, alpha=0.75, beta=-1.5, **kw, **k)
  want = conv(x, w, b, r, implementation="xla")
  r = normal(rng, want.shape, dtype)
  f = jax.jit(lambda x, w, b, r: conv(x, w, b, r, algorithm="winograd"))
  got = f(x, w, b, r)
  want = conv(x, w, b, r, implementation="xla")
  assert got.shape == want.shape and got.dtype == dtype
  assert_close(got, want, TOL[dtype])
  assert "jaxdnn_conv_fwd" in custom_call_targets(f.lower(x, w, b, r).compile().as_text())


@pytest.mark.parametrize("case", [0, 2, 6])
def test_gradients(rng, case):
  xs, ws, kw = CASES[case]
  x, w, b = _args(rng, xs, ws, jnp.float32)
  f = lambda x, w, b: jnp.sum(jnp.sin(jaxdnn.conv(x, w, b, algorithm="winograd", **kw)))
  check_grads(f, (x, w, b), order=1, modes=("rev",), atol=2e-2, rtol=2e-2)
  got = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(x, w, b)
  ref = lambda x, w, b: jnp.sum(jnp.sin(jaxdnn.conv(x, w, b, implementation="xla", **kw)))
  for a, e in zip(got, jax.grad(ref, argnums=(0, 1, 2))(x, w, b)):
    assert_close(a, e, 5e-5)


def test_vmap_over_weights_folds_into_groups(rng):
  x = normal(rng, (3, 2, 7, 6, 4))
  w = normal(rng, (3, 3, 3, 4, 5), scale=0.3)
  f = lambda **k: jax.vmap(lambda x, w: jaxdnn.conv(x, w, padding="SAME", **k))
  got = jax.jit(f(algorithm="winograd"))(x, w)
  assert_close(got, f(implementation="xla")(x, w), 2e-5)


@pytest.mark.parametrize("size, tile", [(6, 4), (3, 2)])
def test_plan_and_nan(size, tile):
  """The plan names the tile; a NaN input reaches every output the direct
  sum's does, and beyond those only outputs of the same output tiles (the
  transforms mix a tile's inputs)."""
  x = jnp.ones((1, size, size, 2)).at[0, 2, 1, 1].set(jnp.nan)
  w = jnp.ones((3, 3, 2, 3))
  plan = jaxdnn.conv_plan(x, w, algorithm="winograd")
  assert plan["algorithm"] == "winograd", plan
  assert f"Winograd F({tile}x{tile}, 3x3)" in plan["config"]["kernel"], plan
  got = np.isnan(np.asarray(jaxdnn.conv(x, w, algorithm="winograd")))
  want = np.isnan(np.asarray(jaxdnn.conv(x, w, implementation="xla")))
  assert np.all(got[want])
  tiles = np.zeros_like(want)
  for r, c in zip(*np.nonzero(want[0, :, :, 0])):
    r0, c0 = r // tile * tile, c // tile * tile
    tiles[0, r0 : r0 + tile, c0 : c0 + tile] = True
  assert not np.any(got & ~tiles)


@pytest.mark.parametrize(
  "ws, kw",
  [
    ((3, 3, 4, 4), dict(strides=2)),
    ((3, 3, 4, 4), dict(kernel_dilation=2)),
    ((3, 3, 4, 4), dict(input_dilation=2, padding="VALID")),
    ((5, 5, 4, 4), dict()),
    ((3, 4, 4), dict()),
  ],
)
def test_refuses_what_it_does_not_serve(ws, kw):
  x = jnp.ones((1, 8, 8, 4)) if len(ws) == 4 else jnp.ones((1, 8, 4))
  with pytest.raises(ValueError, match="winograd"):
    jaxdnn.conv(x, jnp.ones(ws), algorithm="winograd", **kw)


# GPU: wide channels (16-byte input transform, several GEMM k blocks and
# n blocks), groups of 40 channels, float32 output from 16-bit inputs.
GPU_CASES = [
  ((2, 13, 11, 64), (3, 3, 64, 72), jnp.bfloat16, dict(padding="SAME", activation="relu")),
  ((3, 8, 9, 80), (3, 3, 40, 96), jnp.float16, dict(feature_group_count=2, activation="silu")),
  (
    (2, 6, 7, 48),
    (3, 3, 48, 40),
    jnp.bfloat16,
    dict(padding=((0, 1), (2, 0)), preferred_element_type=jnp.float32),
  ),
  ((1, 17, 15, 96), (3, 3, 96, 130), jnp.float32, dict(padding="SAME", activation="gelu")),
]


@pytest.mark.skipif(not on_gpu(), reason="needs a GPU")
@pytest.mark.parametrize("case", range(len(GPU_CASES)))
def test_cuda_wide_channels(rng, case):
  xs, ws, dtype, kw = GPU_CASES[case]
  x, w, b = _args(rng, xs, ws, dtype)
  f = jax.jit(lambda x, w, b: jaxdnn.conv(x, w, b, algorithm="winograd", **kw))
  got = f(x, w, b)
  want = jaxdnn.conv(x, w, b, implementation="xla", **kw)
  assert got.dtype == want.dtype
  assert_close(got, want, TOL[dtype])
  assert "jaxdnn_conv_fwd" in custom_call_targets(f.lower(x, w, b).compile().as_text())
  tile = 4 if dtype == jnp.float32 else 2
  plan = jaxdnn.conv_plan(x, w, b, algorithm="winograd", **kw)
  assert (
    plan["implementation"] == "cuda"
    and f"Winograd F({tile}x{tile}, 3x3) (CUDA)" in (plan["config"]["kernel"])
  ), plan


@pytest.mark.skipif(not on_gpu(), reason="needs a GPU")
def test_cuda_grad_and_vmap_of_grad(rng):
  x, w, b = _args(rng, (3, 2, 9, 7, 16), (3, 3, 16, 24), jnp.bfloat16)
  loss = lambda **k: (
    lambda x, w, b: jnp.sum(jnp.tanh(jaxdnn.conv(x, w, b, **k).astype(jnp.float32)))
  )
  per_example = lambda **k: jax.vmap(
    jax.grad(loss(**k), argnums=(0, 1, 2)), in_axes=(0, None, None)
  )
  got = jax.jit(per_example(algorithm="winograd"))(x, w, b)
  want = per_example(implementation="xla")(x, w, b)
  for a, e in zip(got, want):
    assert_close(a, e, 5e-2)
