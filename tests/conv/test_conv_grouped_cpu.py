"""algorithm="direct" on grouped (not depthwise) convolutions on the CPU:
the direct sum in cpp/conv/cpu/conv_kernels.cc (the counterpart of the CUDA
grouped kernels) against the oracle, forward and the three gradients, over
1D-3D, strides with asymmetric padding, kernel and input dilation, odd
channel counts a group and a channel multiplier; the plan names it. CPU
only: on a GPU the CUDA kernels' own file tests the same API."""

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import assert_close, custom_call_targets, normal
from conftest import on_gpu

import jaxdnn

pytestmark = pytest.mark.skipif(on_gpu(), reason="the CPU's grouped direct loop")

# (x shape, w shape, groups, keyword arguments)
CASES = [
  ((2, 9, 7, 12), (3, 3, 3, 8), 4, dict(activation="relu")),
  ((2, 9, 10, 16), (3, 3, 8, 12), 2, dict(strides=2, padding=((1, 2), (0, 1)))),
  ((3, 20, 6), (5, 2, 9), 3, dict(kernel_dilation=2, padding="CAUSAL")),
  ((1, 5, 6, 6, 8), (3, 3, 3, 2, 8), 4, dict(strides=(2, 1, 1), activation="silu")),
  ((2, 6, 5, 4), (3, 3, 1, 8), 4, dict(input_dilation=2, padding=((1, 1), (2, 0)))),
]


@pytest.fixture
def rng(request):
  return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=str)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_grouped_direct_matches_the_oracle(rng, case, dtype):
  xs, ws, groups, kw = CASES[case]
  kw = dict(kw, feature_group_count=groups)
  x, w, b = normal(rng, xs, dtype), normal(rng, ws, dtype, scale=0.3), normal(rng, ws[-1:], dtype)
  f = jax.jit(lambda x, w, b: jaxdnn.conv(x, w, b, algorithm="direct", **kw))
  assert "jaxdnn_conv_fwd" in custom_call_targets(f.lower(x, w, b).compile().as_text())
  wide = lambda a: a.astype(jnp.float32)
  want = jaxdnn.conv(wide(x), wide(w), wide(b), implementation="xla", **kw)
  tol = 2e-5 if dtype == jnp.float32 else 2e-2
  assert_close(f(x, w, b).astype(jnp.float32), want, tol)
  loss = lambda impl: (
    lambda x, w, b: jnp.sum(jnp.sin(jaxdnn.conv(x, w, b, **impl, **kw).astype(jnp.float32)))
  )
  got = jax.jit(jax.grad(loss(dict(algorithm="direct")), argnums=(0, 1, 2)))(x, w, b)
  ref = jax.grad(loss(dict(implementation="xla")), argnums=(0, 1, 2))(wide(x), wide(w), wide(b))
  for a, e in zip(got, ref):
    assert_close(a.astype(jnp.float32), e, 5e-5 if dtype == jnp.float32 else 5e-2)


def test_grouped_direct_plan_and_dense_refusal():
  x = jax.ShapeDtypeStruct((2, 8, 8, 12), jnp.float32)
  plan = jaxdnn.conv_plan(
    x, jax.ShapeDtypeStruct((3, 3, 3, 8), jnp.float32), feature_group_count=4, algorithm="direct"
  )
  assert plan["implementation"] == "cpu" and plan["algorithm"] == "direct", plan
  assert "grouped direct sum" in plan["config"]["kernel"], plan
  with pytest.raises(ValueError, match="feature_group_count > 1"):
    jaxdnn.conv_plan(x, jax.ShapeDtypeStruct((3, 3, 12, 8), jnp.float32), algorithm="direct")
