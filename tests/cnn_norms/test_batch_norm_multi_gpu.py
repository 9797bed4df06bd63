"""Synchronized BatchNorm across the GPUs of one host (skips elsewhere).

The CPU-device version is in test_batch_norm.py; here each GPU runs the
CUDA kernels on its share of the batch, the statistics meet in one all-reduce
each way, and the reference is the same op on one GPU with the whole batch.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import assert_close, normal
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxdnn

GPUS = [d for d in jax.devices() if d.platform == "gpu"]
pytestmark = pytest.mark.skipif(len(GPUS) < 2, reason="needs 2 GPUs")


def _bn(x, s, b, axis_name=None):
  return jaxdnn.batch_norm(
    x, s, b, use_running_average=False, axis_name=axis_name, activation="relu"
  )


def _all_reduces(text):
  return text.count("all-reduce(") + text.count("all-reduce-start(")


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_synchronized_batch_norm_over_gpus_matches_one_gpu(dtype):
  n = len(GPUS)
  mesh = jax.make_mesh((n,), ("data",), devices=GPUS)
  rng = np.random.default_rng(3)
  x = normal(rng, (8 * n, 14, 14, 64), dtype, scale=2.0, offset=0.5)
  s, b = 1 + 0.1 * normal(rng, (64,)), normal(rng, (64,))

  def loss(x, s, b, axis_name=None):
    return jnp.sum(jnp.sin(_bn(x, s, b, axis_name)[0].astype(jnp.float32)))

  step = jax.jit(
    jax.shard_map(
      lambda x, s, b: (_bn(x, s, b, "data"), jax.grad(loss, (0, 1, 2))(x, s, b, "data")),
      mesh=mesh,
      in_specs=(P("data"), P(), P()),
      out_specs=((P("data"), P(), P()), (P("data"), P(), P())),
    )
  )
  xs = jax.device_put(x, NamedSharding(mesh, P("data")))
  (y, rm, rv), grads = step(xs, s, b)
  on_one = jax.device_put((x, s, b), GPUS[0])
  want_y, want_rm, want_rv = jax.jit(_bn)(*on_one)
  want_grads = jax.jit(jax.grad(loss, (0, 1, 2)))(*on_one)

  t = 2e-2 if dtype == jnp.bfloat16 else 2e-5
  assert_close(y, want_y, t)
  assert_close(rm, want_rm, 2e-5)
  assert_close(rv, want_rv, 2e-5)
  for got, want in zip(grads, want_grads):
    assert_close(got, want, 5e-2 if dtype == jnp.bfloat16 else 5e-5)

  text = step.lower(xs, s, b).compile().as_text()
  assert "jaxdnn_batch_norm" in text, "the CUDA kernels, not a fallback"
  # One for the statistics, one for the backward's sums (which are also the
  # parameters' gradients): no third collective.
  assert _all_reduces(text) == 2, text.count("all-reduce")
