"""jaxdnn.rnn with a sharded batch beyond the conformance checks (which shard
over jax.make_mesh's Explicit axes): Auto axes, a replicated initial state
beside a sharded batch, and a batch the mesh does not divide."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import collectives
from conftest import requires_cpu_backend
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxdnn
from jaxdnn.recurrent.layout import init_params

pytestmark = [
  requires_cpu_backend,
  pytest.mark.skipif(len(jax.devices()) < 4, reason="needs 4 devices"),
]


def _case(mode, batch, layers=2, steps=4, feat=3, hidden=5):
  k = jax.random.split(jax.random.key(3), 3)
  params = init_params(k[0], mode, feat, hidden, num_layers=layers)
  x = jax.random.normal(k[1], (batch, steps, feat))
  h0 = 0.5 * jax.random.normal(k[2], (layers, batch, hidden))
  return params, x, h0


def _grad(mode, impl, constrain=None):
  def loss(params, x, h0):
    if constrain is not None:
      x = jax.lax.with_sharding_constraint(x, constrain)
    out, h = jaxdnn.rnn(x, params, mode=mode, initial_state=h0, implementation=impl)
    return jnp.sum(jnp.sin(out)) + sum(jnp.sum(jnp.cos(s)) for s in jax.tree.leaves(h))

  return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def _close(got, want, tol=2e-5):
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def test_auto_axes_two_layers_stay_sharded():
  # Propagation alone (no sharding in types): the second layer's input
  # projection keeps the batch split; the weight gradients are all-reduced.
  params, x, h0 = _case("gru", 8)
  mesh = jax.make_mesh((4,), ("data",), axis_types=(AxisType.Auto,))
  put = lambda a, s: jax.device_put(a, NamedSharding(mesh, s))
  args = (params, put(x, P("data")), put(h0, P(None, "data")))
  g = _grad("gru", None)
  _close(g(*args), _grad("gru", "xla")(params, x, h0))
  moved = collectives(g.lower(*args).compile().as_text())
  assert moved == {"all-reduce"}, moved


def test_explicit_axes_replicated_initial_state():
  # The gradient of a replicated h0 is typed replicated like h0 (custom_vjp
  # checks the types); gathering it is the one data movement asked for.
  params, x, h0 = _case("lstm", 8, layers=1)
  h0 = (h0, 0.5 * h0 + 0.1)
  mesh = jax.make_mesh((4,), ("data",), axis_types=(AxisType.Explicit,))
  put = lambda a, s: jax.device_put(a, NamedSharding(mesh, s))
  replicated = lambda tree: jax.tree.map(lambda a: put(a, P()), tree)
  args = (replicated(params), put(x, P("data")), replicated(h0))
  got = _grad("lstm", None)(*args)
  _close(got, _grad("lstm", "xla")(params, x, h0))
  assert got[1].sharding.spec == P("data", None, None)
  assert all(d.sharding.is_fully_replicated for d in got[2])


def test_batch_the_mesh_does_not_divide_runs_whole():
  # 6 examples over 4 devices: the padded rows would enter the weight
  # gradients, so the recurrence runs on the whole batch instead.
  params, x, h0 = _case("lstm", 6, layers=1)
  h0 = (h0, h0)
  mesh = jax.make_mesh((4,), ("data",), axis_types=(AxisType.Auto,))
  with jax.set_mesh(mesh):
    got = _grad("lstm", None, NamedSharding(mesh, P("data")))(params, x, h0)
  _close(got, _grad("lstm", "xla")(params, x, h0))
