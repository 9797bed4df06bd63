"""The CUDA forward (CUTLASS sm90 implicit GEMM, cpp/conv/sm90/) against
the float32 oracle on the cases it serves: 1D-3D, strides, kernel dilation,
padding, bias, residual with alpha and beta, relu and relu6, bfloat16 and
float16; its custom call in the HLO; 1x1 stride-1 layers, which a forced
algorithm="implicit_gemm" runs as a persistent GEMM (conv1x1_gemm_sm90),
against the oracle and the implicit-GEMM convolution the default runs; the
gradients through the sm90 data and weight gradient kernels (their custom
calls in the HLO, XLA's convolution where a plan refuses: the strided data
gradient) against the oracle's, the weight gradient bitwise deterministic;
calls the forward does not serve run on XLA with a warning. Skipped without
a GPU whose build has the kernel."""

import warnings

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
  reason="needs a GPU and a build with the CUTLASS convolution kernel",
)

CASES = [
  ((2, 16, 16, 64), (3, 3, 64, 64), dict(activation="relu")),
  ((2, 15, 13, 32), (3, 3, 32, 48), dict(strides=2, activation="relu6")),
  ((2, 14, 14, 256), (1, 1, 256, 128), dict(strides=2, padding="VALID")),
  ((2, 32, 32, 8), (7, 7, 8, 64), dict(strides=2, padding=((3, 3), (3, 3)), activation="relu")),
  ((1, 6, 10, 10, 16), (3, 3, 3, 16, 32), dict(activation="relu")),
  ((3, 50, 24), (5, 24, 40), dict(kernel_dilation=2, padding="CAUSAL")),
  ((2, 9, 9, 136), (3, 3, 136, 24), dict(padding=((2, 0), (1, 1)))),
  # 1x1 stride 1: the persistent GEMM (forced), M = 147 and 198 (partial tiles).
  ((3, 7, 7, 256), (1, 1, 256, 512), dict(activation="relu")),
  ((2, 9, 11, 72), (1, 1, 72, 200), dict(padding="VALID", activation="relu6")),
  ((3, 40, 64), (1, 64, 96), dict()),
]


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=str)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_forward_matches_oracle(case, dtype):
  rng = np.random.default_rng(case)
  xs, ws, kw = CASES[case]
  x = normal(rng, xs, dtype)
  w = normal(rng, ws, dtype, scale=1.0 / np.sqrt(np.prod(ws[:-1])))
  b = normal(rng, ws[-1:], jnp.float32)
  f = jax.jit(lambda x, w, b: jaxdnn.conv(x, w, b, algorithm="implicit_gemm", **kw))
  assert "jaxdnn_conv_fwd" in custom_call_targets(f.lower(x, w, b).compile().as_text())
  got = f(x, w, b)
  wide = lambda a: a.astype(jnp.float32)
  want = jaxdnn.conv(wide(x), wide(w), b, implementation="xla", **kw).astype(dtype)
  assert_close(got, want, 1e-2)


def test_residual_alpha_beta_and_gradients():
  rng = np.random.default_rng(7)
  x = normal(rng, (2, 12, 12, 32), jnp.bfloat16)
  w = normal(rng, (3, 3, 32, 32), jnp.bfloat16, scale=0.06)
  b = normal(rng, (32,), jnp.bfloat16)
  r = normal(rng, (2, 12, 12, 32), jnp.bfloat16)

  def loss(impl):
    def f(x, w, b, r):
      forced = dict(algorithm="implicit_gemm") if impl is None else {}
      y = jaxdnn.conv(
        x, w, b, residual=r, alpha=0.5, beta=2.0, activation="relu", implementation=impl, **forced
      )
      y = y.astype(jnp.float32)
      return jnp.sum(y * jnp.cos(jnp.arange(y.size, dtype=jnp.float32).reshape(y.shape)))

    return f

  wide = lambda a: a.astype(jnp.float32)
  got = jax.jit(loss(None))(x, w, b, r)
  want = loss("xla")(wide(x), wide(w), wide(b), wide(r))
  assert_close(got, want, 2e-2)
  g = jax.jit(jax.grad(loss(None), argnums=(0, 1, 2, 3)))(x, w, b, r)
  gw = jax.grad(loss("xla"), argnums=(0, 1, 2, 3))(wide(x), wide(w), wide(b), wide(r))
  for a, c in zip(g, gw):
    assert_close(a, c, 5e-2)


def test_unserved_calls_run_on_xla_with_a_warning():
  x = jnp.ones((1, 8, 8, 6), jnp.bfloat16)  # 6 channels: not a multiple of 8
  w = jnp.ones((3, 3, 6, 8), jnp.bfloat16)
  with pytest.warns(UserWarning, match="does not serve"):
    y = jaxdnn.conv(x, w)
  assert y.shape == (1, 8, 8, 8)
  with pytest.raises(ValueError, match="cannot serve"):
    jaxdnn.conv(x, w, implementation="cuda")


def test_plan_reports_the_kernel():
  x = jax.ShapeDtypeStruct((2, 16, 16, 64), jnp.bfloat16)
  w = jax.ShapeDtypeStruct((3, 3, 64, 64), jnp.bfloat16)
  plan = jaxdnn.conv_plan(x, w, activation="relu", algorithm="implicit_gemm")
  assert plan["implementation"] == "cuda" and plan["algorithm"] == "implicit_gemm", plan
  assert plan["config"]["tile"] == "128x64x64" and plan["config"]["workspace_bytes"] > 0
  plan = jaxdnn.conv_plan(
    x, jax.ShapeDtypeStruct((3, 3, 64, 256), jnp.bfloat16), algorithm="implicit_gemm"
  )
  assert plan["config"]["tile"] == "128x128x64"
  plan = jaxdnn.conv_plan(x, jax.ShapeDtypeStruct((3, 3, 64, 64), jnp.bfloat16), activation="gelu")
  assert plan["implementation"] == "xla" and "does not serve" in plan["reason"]
  with pytest.raises(ValueError, match="cannot serve"):
    jaxdnn.conv(
      jnp.ones((1, 8, 8, 64), jnp.bfloat16),
      jnp.ones((3, 3, 64, 64), jnp.bfloat16),
      activation="gelu",
      algorithm="implicit_gemm",
    )


def test_1x1_layers_run_as_a_persistent_gemm():
  """cpp/conv/heuristics.h, PreferConv1x1Gemm: a 1x1 stride-1 forward runs
  on the persistent GEMM, forced or by default (it measured 1.2-2.1x the
  implicit GEMM on every ResNet-50 1x1 layer), also where the default would
  otherwise leave the layer to XLA; a strided 1x1 keeps the implicit GEMM.
  Both kernels match the oracle and each
  other with the whole epilogue (bias, residual, alpha, beta, relu)."""
  xs, ws = (32, 14, 14, 256), (1, 1, 256, 256)  # the default picks the sm90 conv here
  x_spec, w_spec = (jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in (xs, ws))
  forced = jaxdnn.conv_plan(x_spec, w_spec, activation="relu", algorithm="implicit_gemm")
  assert "persistent GEMM" in forced["config"]["kernel"], forced
  assert forced["config"]["tile"] in ("128x128x64", "128x256x64"), forced
  default = jaxdnn.conv_plan(x_spec, w_spec, activation="relu")
  assert default["implementation"] == "cuda", default
  assert "persistent GEMM" in default["config"]["kernel"], default
  strided = jaxdnn.conv_plan(x_spec, w_spec, strides=2, algorithm="implicit_gemm")
  assert "implicit GEMM" in strided["config"]["kernel"], strided
  # ResNet-50's first 1x1 layer: XLA's by the implicit-GEMM rules, the GEMM's now.
  big = [jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in ((32, 56, 56, 64), (1, 1, 64, 256))]
  big_plan = jaxdnn.conv_plan(*big)
  assert big_plan["implementation"] == "cuda", big_plan
  assert "persistent GEMM" in big_plan["config"]["kernel"], big_plan

  rng = np.random.default_rng(11)
  x = normal(rng, xs, jnp.bfloat16)
  w = normal(rng, ws, jnp.bfloat16, scale=1.0 / 16)
  b = normal(rng, ws[-1:], jnp.bfloat16)
  r = normal(rng, xs[:-1] + ws[-1:], jnp.bfloat16)
  kw = dict(residual=r, alpha=0.5, beta=2.0, activation="relu")
  gemm = jax.jit(lambda x, w, b: jaxdnn.conv(x, w, b, algorithm="implicit_gemm", **kw))
  assert "jaxdnn_conv_fwd" in custom_call_targets(gemm.lower(x, w, b).compile().as_text())
  conv = jax.jit(lambda x, w, b: jaxdnn.conv(x, w, b, **kw))
  wide = lambda a: a.astype(jnp.float32)
  want = jaxdnn.conv(
    wide(x), wide(w), wide(b), residual=wide(r), alpha=0.5, beta=2.0, activation="relu",
    implementation="xla",
  ).astype(jnp.bfloat16)  # fmt: skip
  got = gemm(x, w, b)
  assert_close(got, want, 1e-2)
  assert_close(got, conv(x, w, b), 1e-2)


@pytest.mark.parametrize(
  "xs, ws, kw",
  [
    ((4, 14, 14, 64), (1, 1, 64, 128), dict(strides=2)),
    ((3, 15, 9, 32), (1, 1, 32, 64), dict(strides=(2, 3), activation="relu")),
  ],
)
def test_strided_1x1_defaults_to_xla(xs, ws, kw):
  """cpp/conv/heuristics.h, StridedPointwise: XLA's strided convolution beat
  the sm90 implicit GEMM and the 1x1 GEMM on the strided view on every
  ResNet-50 downsampling 1x1 layer, forward and gradients, so the default
  takes it (chosen: no warning); a forced algorithm still runs the kernel."""
  rng = np.random.default_rng(sum(xs))
  x = normal(rng, xs, jnp.bfloat16)
  w = normal(rng, ws, jnp.bfloat16, scale=0.1)
  plan = jaxdnn.conv_plan(x, w, **kw)
  assert plan["implementation"] == "xla" and "measured faster" in plan["reason"], plan
  forced = jaxdnn.conv_plan(x, w, algorithm="implicit_gemm", **kw)
  assert forced["implementation"] == "cuda", forced
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    got = jax.jit(lambda x, w: jaxdnn.conv(x, w, **kw))(x, w)
  wide = lambda a: a.astype(jnp.float32)
  want = jaxdnn.conv(wide(x), wide(w), implementation="xla", **kw).astype(jnp.bfloat16)
  assert_close(got, want, 1e-2)


# (x, w, conv kwargs, whether the sm90 data gradient serves it: stride 1 only)
GRAD_CASES = [
  ((4, 14, 14, 64), (3, 3, 64, 64), dict(activation="relu"), True),
  ((2, 9, 11, 128), (1, 1, 128, 256), dict(padding="VALID"), True),
  # With an activation the forward stays: the 1x1 GEMM (forced) saves y.
  ((2, 9, 11, 128), (1, 1, 128, 256), dict(activation="relu"), True),
  ((2, 12, 12, 32), (3, 3, 32, 32), dict(activation="relu6", alpha=0.5, beta=2.0), True),
  ((2, 6, 8, 10, 32), (3, 3, 3, 32, 16), dict(activation="relu"), True),
  ((3, 40, 24), (5, 24, 48), dict(kernel_dilation=2, padding="CAUSAL"), True),
  ((2, 15, 13, 32), (3, 3, 32, 48), dict(strides=2, activation="relu"), False),
]


def _grad_loss(xs, kw, impl, with_residual):
  cot = normal(np.random.default_rng(99), (xs[0], 1), jnp.float32)  # broadcast over the rest

  def f(x, w, b, r):
    forced = dict(algorithm="implicit_gemm") if impl is None else {}
    y = jaxdnn.conv(
      x, w, b, residual=r if with_residual else None, implementation=impl, **kw, **forced
    )
    y = y.astype(jnp.float32)
    wave = jnp.cos(jnp.arange(y.size, dtype=jnp.float32).reshape(y.shape) * 0.37)
    return jnp.sum(y * wave * cot.reshape((-1,) + (1,) * (y.ndim - 1)))

  return f


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=str)
@pytest.mark.parametrize("case", range(len(GRAD_CASES)))
def test_gradients_run_the_sm90_kernels_and_match_the_oracle(case, dtype):
  xs, ws, kw, dgrad_served = GRAD_CASES[case]
  rng = np.random.default_rng(100 + case)
  x = normal(rng, xs, dtype)
  w = normal(rng, ws, dtype, scale=1.0 / np.sqrt(np.prod(ws[:-1])))
  b = normal(rng, ws[-1:], jnp.float32)
  with_residual = "beta" in kw
  out_shape = jax.eval_shape(lambda x, w: jaxdnn.conv(x, w, **kw), x, w).shape
  r = normal(rng, out_shape, dtype) if with_residual else jnp.zeros((), dtype)
  grad = jax.jit(jax.grad(_grad_loss(xs, kw, None, with_residual), argnums=(0, 1, 2, 3)))
  targets = custom_call_targets(grad.lower(x, w, b, r).compile().as_text())
  # Without an activation the gradients need nothing from the forward, so a
  # loss linear in y lets XLA drop the forward's custom call.
  assert "jaxdnn_conv_wgrad" in targets, targets
  assert ("jaxdnn_conv_fwd" in targets) == ("activation" in kw), targets
  assert ("jaxdnn_conv_dgrad" in targets) == dgrad_served, targets
  got = grad(x, w, b, r)
  wide = lambda a: a.astype(jnp.float32)
  want = jax.grad(_grad_loss(xs, kw, "xla", with_residual), argnums=(0, 1, 2, 3))(
    wide(x), wide(w), b, wide(r)
  )
  names = ("dx", "dw", "dbias", "dresidual") if with_residual else ("dx", "dw", "dbias")
  for name, a, c in zip(names, got, want):
    assert a.dtype == (jnp.float32 if name == "dbias" else dtype), (name, a.dtype)
    assert_close(a, c, 5e-2, err_msg=name)
  again = grad(x, w, b, r)
  np.testing.assert_array_equal(np.asarray(again[1]), np.asarray(got[1]))  # deterministic dw
  np.testing.assert_array_equal(np.asarray(again[2]), np.asarray(got[2]))  # and d bias


def test_plan_reports_the_gradient_kernels():
  x = jax.ShapeDtypeStruct((2, 16, 16, 64), jnp.bfloat16)
  w = jax.ShapeDtypeStruct((3, 3, 64, 64), jnp.bfloat16)
  forced = dict(algorithm="implicit_gemm")
  grads = jaxdnn.conv_plan(x, w, activation="relu", **forced)["gradients"]
  assert "CUTLASS dgrad" in grads and "CUTLASS wgrad" in grads, grads
  grads = jaxdnn.conv_plan(x, w, strides=2, **forced)["gradients"]
  assert "data gradient: XLA" in grads and "CUTLASS wgrad" in grads, grads
  # By default: stride 1 on XLA's convolution (measured faster), strided on
  # the sm90 weight gradient (cpp/conv/heuristics.h).
  x256 = jax.ShapeDtypeStruct((2, 14, 14, 256), jnp.bfloat16)
  w256 = jax.ShapeDtypeStruct((3, 3, 256, 256), jnp.bfloat16)
  assert "measured faster" in jaxdnn.conv_plan(x256, w256)["gradients"]
  assert "CUTLASS wgrad" in jaxdnn.conv_plan(x, w, strides=2)["gradients"]


def test_default_follows_the_measured_rules():
  """cpp/conv/heuristics.h: the sm90 forward by default on strided layers and
  on up to 2^17 output positions with C_out a multiple of 128; XLA's
  convolution (chosen, so no warning) on the large 64-channel layers; a
  strided layer's weight gradient on the sm90 kernel."""
  bf16 = lambda *s: jax.ShapeDtypeStruct(s, jnp.bfloat16)
  big64 = jaxdnn.conv_plan(bf16(64, 56, 56, 64), bf16(3, 3, 64, 64))
  assert big64["implementation"] == "xla" and "measured faster" in big64["reason"], big64
  strided = jaxdnn.conv_plan(bf16(64, 56, 56, 128), bf16(3, 3, 128, 128), strides=2)
  assert strided["implementation"] == "cuda" and "CUTLASS wgrad" in strided["gradients"], strided
  small = jaxdnn.conv_plan(bf16(32, 14, 14, 256), bf16(3, 3, 256, 256))
  assert small["implementation"] == "cuda", small
  x = jnp.ones((2, 16, 16, 64), jnp.bfloat16)
  w = jnp.ones((3, 3, 64, 64), jnp.bfloat16)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    y = jax.jit(lambda x, w: jaxdnn.conv(x, w))(x, w)
  assert y.shape == (2, 16, 16, 64)


@pytest.mark.parametrize(
  "xs, kw",
  [
    ((2, 13, 11, 64), dict(padding="SAME")),
    ((3, 17, 15, 32), dict(padding="SAME", kernel_dilation=4, activation="relu")),
    ((2, 9, 12, 16), dict(padding=((1, 2), (0, 1)), strides=2, activation="gelu")),
  ],
)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_depthwise_direct_forced_on_cuda(xs, kw, dtype):
  """cpp/conv/sm80/depthwise_fwd.cu: algorithm='direct' runs a depthwise
  forward on the CUDA channel-vector loop (the custom call is in the HLO,
  conv_plan names the kernel), matches the float32 oracle with bias and
  residual, and differentiates (the data gradient on the same kernel through
  the transposed problem, the weight gradient on the depthwise wgrad kernel
  where it serves: 16-bit, or float32 without bias and activation)."""
  c = xs[-1]
  rng = np.random.default_rng(5)
  x = normal(rng, xs, dtype)
  w = normal(rng, (3, 3, 1, c), dtype, scale=0.3)
  b = normal(rng, (c,), dtype)
  spec = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, w)]
  plan = jaxdnn.conv_plan(*spec, feature_group_count=c, algorithm="direct", **kw)
  assert plan["implementation"] == "cuda", plan
  assert "depthwise direct" in plan["config"]["kernel"], plan
  assert "depthwise forward kernel on the transposed problem" in plan["gradients"], plan
  f = jax.jit(lambda x, w, b: jaxdnn.conv(x, w, b, feature_group_count=c, algorithm="direct", **kw))
  assert "jaxdnn_conv_fwd" in custom_call_targets(f.lower(x, w, b).compile().as_text())
  wide = lambda a: a.astype(jnp.float32)
  want = jaxdnn.conv(wide(x), wide(w), wide(b), feature_group_count=c, implementation="xla", **kw)
  got = f(x, w, b)
  assert_close(got.astype(jnp.float32), want, 2e-2 if dtype == jnp.bfloat16 else 1e-4)
  loss = lambda impl: (
    lambda x, w: jnp.sum(
      jnp.sin(jaxdnn.conv(x, w, b, feature_group_count=c, **impl, **kw).astype(jnp.float32))
    )
  )
  grad = jax.jit(jax.grad(loss(dict(algorithm="direct")), argnums=(0, 1)))
  if dtype == jnp.bfloat16:
    targets = custom_call_targets(grad.lower(x, w).compile().as_text())
    assert "jaxdnn_conv_wgrad" in targets and "jaxdnn_conv_dgrad" not in targets, targets
  g = grad(x, w)
  g_want = jax.grad(loss(dict(implementation="xla")), argnums=(0, 1))(x, w)
  for a, e in zip(g, g_want):
    assert_close(
      a.astype(jnp.float32), e.astype(jnp.float32), 5e-2 if dtype == jnp.bfloat16 else 1e-3
    )


@pytest.mark.parametrize("dilation, direct", [(2, True), (1, False)])
def test_depthwise_default_goes_direct_with_a_dilated_window(dilation, direct):
  """algorithm=None on CUDA: a depthwise convolution with a dilated window
  runs on the direct kernels, gradients included (XLA's are 17x slower
  forward, two orders of magnitude backward); an undilated one stays on XLA's
  (faster there)."""
  c = 32
  rng = np.random.default_rng(7)
  x = normal(rng, (2, 15, 13, c), jnp.bfloat16)
  w = normal(rng, (3, 3, 1, c), jnp.bfloat16, scale=0.3)
  kw = dict(feature_group_count=c, padding="SAME", kernel_dilation=dilation)
  spec = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, w)]
  plan = jaxdnn.conv_plan(*spec, **kw)
  assert (plan["algorithm"] == "direct") == direct, plan
  loss = lambda **impl: (
    lambda x, w: jnp.sum(jnp.sin(jaxdnn.conv(x, w, **kw, **impl).astype(jnp.float32)))
  )
  grad = jax.jit(jax.grad(loss(), argnums=(0, 1)))
  targets = custom_call_targets(grad.lower(x, w).compile().as_text())
  assert ("jaxdnn_conv_wgrad" in targets) == direct, targets
  assert ("jaxdnn_conv_fwd" in targets) == direct, targets
  if direct:
    g, g_want = grad(x, w), jax.grad(loss(implementation="xla"), argnums=(0, 1))(x, w)
    for a, e in zip(g, g_want):
      assert_close(a.astype(jnp.float32), e.astype(jnp.float32), 5e-2)
