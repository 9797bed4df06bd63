"""Rows sharded over several CPU devices: right answer, no all-gather."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from norm_cases import assert_close, call, params, rand

pytestmark = pytest.mark.skipif(len(jax.devices()) < 4, reason="needs 4 devices")


@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("residual", [False, True])
def test_sharded_rows(kind, residual):
  mesh = jax.make_mesh((2, 2), ("data", "model"))
  x, r = rand((8, 6, 64)), rand((8, 6, 64))
  s, b = params(kind, 64)
  sh = NamedSharding(mesh, P("data", "model", None))
  xs, rs = jax.device_put(x, sh), jax.device_put(r, sh)

  def loss(impl):
    def f(x, r, s, b):
      out = call(kind, x, s, b, residual=r if residual else None, implementation=impl)
      y = out[0] if residual else out
      return jnp.sum(jnp.sin(y) * jnp.arange(64.0)), y

    return f

  fwd = jax.jit(lambda x, r: loss(None)(x, r, s, b)[1])
  y = fwd(xs, rs)
  assert_close(y, loss("xla")(x, r, s, b)[1], 2e-5)
  assert y.sharding.spec[:2] == ("data", "model")
  hlo = fwd.lower(xs, rs).compile().as_text()
  assert "jaxdnn_norm_fwd" in hlo and "all-gather" not in hlo and "all-to-all" not in hlo

  argnums = (0, 1, 2, 3) if kind == "layer" else (0, 1, 2)
  grad = jax.jit(jax.grad(lambda *a: loss(None)(*a)[0], argnums=argnums))
  got = grad(xs, rs, s, b)
  want = jax.grad(lambda *a: loss("xla")(*a)[0], argnums=argnums)(x, r, s, b)
  for g, w in zip(got, want):
    assert_close(g, w, 1e-4)
  hlo = grad.lower(xs, rs, s, b).compile().as_text()
  assert "jaxdnn_norm_bwd" in hlo and "all-gather" not in hlo
  # The only communication: summing the parameter gradients over the shards.
  assert "all-reduce" in hlo


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_sharded_16bit_parameters(kind):
  # bfloat16 parameters reach the kernels as they are, whose per-shard
  # gradients come back in bfloat16 and are summed over the shards (in
  # float32: jaxdnn/_sharding.py; the CPU's XLA widens a 16-bit all-reduce
  # by itself, so the compiled HLO here cannot tell).
  mesh = jax.make_mesh((2, 2), ("data", "model"))
  x = rand((8, 6, 64), jnp.bfloat16)
  s, b = (None if p is None else p.astype(jnp.bfloat16) for p in params(kind, 64))
  xs = jax.device_put(x, NamedSharding(mesh, P("data", "model", None)))
  argnums = (1, 2) if kind == "layer" else (1,)

  def grad(impl):
    loss = lambda x, s, b: jnp.sum(
      jnp.sin(call(kind, x, s, b, implementation=impl)) * jnp.arange(64.0)
    )
    return jax.jit(jax.grad(loss, argnums=argnums))

  got, want = grad(None)(xs, s, b), grad("xla")(x, s, b)
  for g, w in zip(got, want):
    assert g.dtype == jnp.bfloat16
    assert_close(g, w, 4e-2)
  hlo = grad(None).lower(xs, s, b).compile().as_text()
  assert "jaxdnn_norm_bwd" in hlo and "all-gather" not in hlo and "all-reduce" in hlo
