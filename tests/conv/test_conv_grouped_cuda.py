"""The grouped tensor-core kernels (cpp/conv/sm80/grouped_fwd.cu,
grouped_wgrad.cu, and the tiled grouped_tiled_*.cu they run where they
serve) against the float32 oracle: 8/16/32 channels a group in, 8-32 out,
1D-3D, strides, kernel and input dilation, asymmetric padding, bias,
residual, activations, bfloat16 and float16 (and a float32 output); the
data gradient through the forward kernel on the transposed problem, the
weight gradient on its own kernel (bitwise deterministic) or on XLA where
it refuses; algorithm="direct" choosing them (the default keeps XLA's).
Skipped without a GPU whose build has the kernels."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import assert_close, custom_call_targets, normal
from conftest import on_gpu

import jaxdnn
from jaxdnn import _extension

pytestmark = pytest.mark.skipif(
  not on_gpu() or not _extension.has_cuda_target("jaxdnn_conv_fwd"),
  reason="needs a GPU and a build with the CUDA convolution kernels",
)

# (x shape, w shape, groups, keyword arguments, weight gradient on the kernel)
CASES = [
  ((2, 13, 11, 64), (3, 3, 8, 64), 8, dict(activation="relu"), True),
  (
    (2, 9, 12, 64),
    (3, 3, 16, 32),
    4,
    dict(strides=2, padding=((1, 2), (0, 1)), activation="gelu"),
    True,
  ),
  ((2, 11, 9, 128), (3, 3, 32, 128), 4, dict(kernel_dilation=2), True),
  ((3, 50, 48), (5, 16, 48), 3, dict(kernel_dilation=2, padding="CAUSAL"), True),
  ((1, 6, 10, 10, 32), (3, 3, 3, 8, 32), 4, dict(activation="silu"), True),
  ((2, 7, 7, 32), (3, 3, 8, 64), 4, dict(input_dilation=2, padding=((1, 1), (2, 0))), True),
  ((2, 10, 10, 256), (3, 3, 8, 256), 32, dict(residual=True, alpha=0.5, beta=2.0), True),
  # The tiled kernel's column blocks (300 outputs in tiles of 128), and a
  # slice of 2 groups of 16 writing 32 channels each.
  ((2, 300, 64), (7, 8, 64), 8, dict(padding="SAME"), True),
  ((2, 12, 30, 64), (3, 3, 16, 128), 4, dict(activation="tanh"), True),
  # Stride 2 in depth under a depth window of 3; 129 columns over several
  # rows (a second column tile of one live column); 3 groups (a one-group
  # slice, 16-byte pixel lines) with an odd chunk count.
  ((1, 7, 6, 6, 24), (3, 3, 3, 8, 48), 3, dict(strides=(2, 1, 1)), True),
  ((2, 3, 129, 32), (3, 3, 16, 32), 2, dict(padding="SAME"), True),
  ((2, 9, 9, 24), (3, 3, 8, 24), 3, dict(activation="relu6"), True),
  # 24 output channels a group (three n tiles: the x4 + x2 B loads).
  ((2, 13, 11, 64), (3, 3, 8, 192), 8, dict(activation="relu"), True),
]


def _args(case, dtype, rng):
  xs, ws, groups, kw, _ = case
  kw = dict(kw)
  x = normal(rng, xs, dtype)
  w = normal(rng, ws, dtype, scale=0.3)
  b = normal(rng, (ws[-1],), dtype)
  extra = {}
  if kw.pop("residual", False):
    out = jax.eval_shape(
      lambda x, w: jaxdnn.conv(x, w, feature_group_count=groups, implementation="xla", **kw), x, w
    )
    extra["residual"] = normal(rng, out.shape, dtype)
  return x, w, b, dict(kw, feature_group_count=groups, **extra)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=str)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_grouped_direct_matches_the_oracle(case, dtype):
  rng = np.random.default_rng(11 + case)
  x, w, b, kw = _args(CASES[case], dtype, rng)
  spec = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, w)]
  plan = jaxdnn.conv_plan(
    *spec, algorithm="direct", **{k: v for k, v in kw.items() if k != "residual"}
  )
  assert plan["implementation"] == "cuda", plan
  assert "grouped direct" in plan["config"]["kernel"], plan
  f = jax.jit(lambda x, w, b: jaxdnn.conv(x, w, b, algorithm="direct", **kw))
  assert "jaxdnn_conv_fwd" in custom_call_targets(f.lower(x, w, b).compile().as_text())
  wide = lambda a: a.astype(jnp.float32)
  kw_wide = {k: wide(v) if hasattr(v, "dtype") else v for k, v in kw.items()}
  want = jaxdnn.conv(wide(x), wide(w), wide(b), implementation="xla", **kw_wide)
  tol = 2e-2 if dtype == jnp.bfloat16 else 2e-3
  assert_close(f(x, w, b).astype(jnp.float32), want, tol)

  loss = lambda impl: (
    lambda x, w, b: jnp.sum(jnp.sin(jaxdnn.conv(x, w, b, **impl, **kw).astype(jnp.float32)))
  )
  grad = jax.jit(jax.grad(loss(dict(algorithm="direct")), argnums=(0, 1, 2)))
  targets = custom_call_targets(grad.lower(x, w, b).compile().as_text())
  assert ("jaxdnn_conv_wgrad" in targets) == CASES[case][4], targets
  got = grad(x, w, b)
  want = jax.grad(loss(dict(implementation="xla")), argnums=(0, 1, 2))(wide(x), wide(w), wide(b))
  for a, e in zip(got, want):
    assert_close(a.astype(jnp.float32), e, 5e-2 if dtype == jnp.bfloat16 else 1e-2)
  again = grad(x, w, b)
  np.testing.assert_array_equal(np.asarray(again[1]), np.asarray(got[1]))
  np.testing.assert_array_equal(np.asarray(again[2]), np.asarray(got[2]))


def test_grouped_float32_output():
  rng = np.random.default_rng(3)
  x, w, b, kw = _args(CASES[0], jnp.bfloat16, rng)
  y = jax.jit(
    lambda x, w, b: jaxdnn.conv(
      x, w, b, preferred_element_type=jnp.float32, algorithm="direct", **kw
    )
  )(x, w, b)
  assert y.dtype == jnp.float32
  wide = lambda a: a.astype(jnp.float32)
  want = jaxdnn.conv(wide(x), wide(w), wide(b), implementation="xla", **kw)
  assert_close(y, want, 1e-2)


def test_grouped_default_stays_on_xla_and_direct_reports_its_kernels():
  """algorithm=None keeps grouped layers on XLA's convolution (the grouped
  kernels measured slower, docs/perf/conv.md); algorithm="direct" runs them,
  gradients included, and conv_plan says so; 24 channels a group are
  refused with the reason."""
  rng = np.random.default_rng(4)
  x = normal(rng, (4, 14, 14, 256), jnp.bfloat16)
  w = normal(rng, (3, 3, 8, 256), jnp.bfloat16, scale=0.3)
  spec = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, w)]
  assert jaxdnn.conv_plan(*spec, feature_group_count=32)["algorithm"] != "direct"
  plan = jaxdnn.conv_plan(*spec, feature_group_count=32, algorithm="direct")
  assert "grouped weight-gradient kernel" in plan["gradients"], plan
  assert "grouped forward kernel on the transposed problem" in plan["gradients"], plan
  loss = lambda x, w: jnp.sum(jaxdnn.conv(x, w, feature_group_count=32, algorithm="direct") ** 2)
  targets = custom_call_targets(jax.jit(jax.grad(loss, (0, 1))).lower(x, w).compile().as_text())
  assert "jaxdnn_conv_fwd" in targets and "jaxdnn_conv_wgrad" in targets, targets
  odd = [
    jax.ShapeDtypeStruct((2, 8, 8, 48), jnp.bfloat16),
    jax.ShapeDtypeStruct((3, 3, 24, 48), jnp.bfloat16),
  ]
  with pytest.raises(ValueError, match="grouped kernel does not serve"):
    jaxdnn.conv_plan(*odd, feature_group_count=2, algorithm="direct")


def test_grouped_vmap_of_grad_folds_into_groups():
  rng = np.random.default_rng(9)
  x = normal(rng, (3, 2, 9, 9, 32), jnp.bfloat16)
  w = normal(rng, (3, 3, 3, 8, 32), jnp.bfloat16, scale=0.3)
  loss = lambda impl: (
    lambda x, w: jnp.sum(
      jnp.sin(jaxdnn.conv(x, w, feature_group_count=4, **impl).astype(jnp.float32))
    )
  )
  got = jax.jit(jax.vmap(jax.grad(loss(dict(algorithm="direct")), (0, 1))))(x, w)
  want = jax.vmap(jax.grad(loss(dict(implementation="xla")), (0, 1)))(
    x.astype(jnp.float32), w.astype(jnp.float32)
  )
  for a, e in zip(got, want):
    assert_close(a.astype(jnp.float32), e, 5e-2)


@pytest.mark.parametrize(
  "ws, groups", [((3, 3, 32, 32), 2), ((3, 3, 8, 48), 2)], ids=["32in16out", "24out"]
)
def test_grouped_empty_batch_gradients_are_zeros(ws, groups):
  """Geometries only the tiled weight gradient serves (more than 20
  accumulator tiles; 24 channels out) stay on it at batch 0: zeros, not an
  error."""
  x = jnp.zeros((0, 8, 8, ws[2] * groups), jnp.bfloat16)
  w = normal(np.random.default_rng(5), ws, jnp.bfloat16, scale=0.3)
  b = jnp.ones((ws[-1],), jnp.bfloat16)
  loss = lambda w, b: jnp.sum(
    jaxdnn.conv(x, w, b, feature_group_count=groups, algorithm="direct").astype(jnp.float32)
  )
  dw, db = jax.jit(jax.grad(loss, argnums=(0, 1)))(w, b)
  assert not np.any(np.asarray(dw, np.float32)) and not np.any(np.asarray(db, np.float32))
