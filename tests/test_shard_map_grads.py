"""Gradients of replicated parameters inside shard_map: each family's
custom_vjp returns them in the parameter's own type (summed over the mesh
axes the data is split on, as JAX's autodiff sums them), equal to the XLA
composition's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import assert_close, normal
from jax.sharding import PartitionSpec as P

import jaxdnn

needs_4 = pytest.mark.skipif(len(jax.devices()) < 4, reason="needs 4 devices")


def _mesh():
  return jax.make_mesh((4,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))


CASES = {
  "conv": (
    lambda x, p, b, impl: jaxdnn.conv(x, p, b, activation="gelu", implementation=impl),
    lambda rng: (
      normal(rng, (8, 6, 6, 4)),
      normal(rng, (3, 3, 4, 5), scale=0.3),
      normal(rng, (5,)),
    ),
  ),
  "layer_norm": (
    lambda x, p, b, impl: jaxdnn.layer_norm(x, p, b, implementation=impl),
    lambda rng: (normal(rng, (8, 16)), normal(rng, (16,)), normal(rng, (16,))),
  ),
  "bias_act": (
    lambda x, p, b, impl: jaxdnn.bias_act(x, p, activation="gelu", implementation=impl),
    lambda rng: (normal(rng, (8, 16)), normal(rng, (16,)), normal(rng, (16,))),
  ),
  "group_norm": (
    lambda x, p, b, impl: jaxdnn.group_norm(x, p, b, num_groups=4, implementation=impl),
    lambda rng: (normal(rng, (8, 5, 5, 16)), normal(rng, (16,)), normal(rng, (16,))),
  ),
  "rms_norm": (
    lambda x, p, b, impl: jaxdnn.rms_norm(x, p, implementation=impl) + 0 * b.sum(),
    lambda rng: (normal(rng, (8, 16)), normal(rng, (16,)), normal(rng, (16,))),
  ),
}


@needs_4
@pytest.mark.parametrize("name", list(CASES))
def test_replicated_parameter_gradients_in_shard_map(name):
  op, make = CASES[name]
  x, p, b = make(np.random.default_rng(0))

  def grads(impl):
    loss = lambda x, p, b: jnp.sum(jnp.sin(op(x, p, b, impl).astype(jnp.float32)))
    f = jax.shard_map(
      jax.grad(loss, argnums=(0, 1, 2)),
      mesh=_mesh(),
      in_specs=(P("data"), P(), P()),
      out_specs=(P("data"), P(), P()),
    )
    return jax.jit(f)(x, p, b)

  for got, want in zip(grads(None), grads("xla")):
    assert got.shape == want.shape
    assert_close(got, want, 5e-5)


def _lstm_params(rng, features, hidden):
  shapes = {"w_ih": (features, 4 * hidden), "w_hh": (hidden, 4 * hidden)}
  p = {k: normal(rng, s, scale=0.3) for k, s in shapes.items()}
  p.update(b_ih=normal(rng, (4 * hidden,), scale=0.1), b_hh=normal(rng, (4 * hidden,), scale=0.1))
  return ((p,),)


@needs_4
def test_rnn_weight_gradients_in_shard_map():
  rng = np.random.default_rng(0)
  x = normal(rng, (8, 5, 3))
  params = _lstm_params(rng, 3, 4)

  def grads(impl):
    loss = lambda x, params: jnp.sum(jnp.sin(jaxdnn.rnn(x, params, implementation=impl)[0]))
    f = jax.shard_map(
      jax.grad(loss, argnums=(0, 1)),
      mesh=_mesh(),
      in_specs=(P("data"), P()),
      out_specs=(P("data"), P()),
    )
    return jax.jit(f)(x, params)

  got, want = grads(None), grads("xla")
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    assert g.shape == w.shape
    assert_close(g, w, 5e-5)


@needs_4
@pytest.mark.parametrize("axis_name", [None, "data"])
def test_batch_norm_parameter_gradients_in_shard_map(axis_name):
  rng = np.random.default_rng(1)
  x, scale, bias = normal(rng, (8, 3, 3, 6)), normal(rng, (6,)), normal(rng, (6,))

  def grads(impl):
    def loss(x, scale, bias):
      y, _, _ = jaxdnn.batch_norm(
        x,
        scale,
        bias,
        use_running_average=False,
        axis_name=axis_name,
        activation="relu",
        implementation=impl,
      )
      return jnp.sum(jnp.sin(y))

    f = jax.shard_map(
      jax.grad(loss, argnums=(0, 1, 2)),
      mesh=_mesh(),
      in_specs=(P("data"), P(), P()),
      out_specs=(P("data"), P(), P()),
    )
    return jax.jit(f)(x, scale, bias)

  for got, want in zip(grads(None), grads("xla")):
    assert got.shape == want.shape
    assert_close(got, want, 5e-5)


@needs_4
def test_attention_bias_and_sinks_gradients_in_shard_map():
  rng = np.random.default_rng(2)
  q, k, v = normal(rng, (8, 5, 4, 8)), normal(rng, (8, 6, 2, 8)), normal(rng, (8, 6, 2, 8))
  bias, sinks = normal(rng, (1, 4, 5, 6)), normal(rng, (4,))

  def grads(impl):
    def loss(q, k, v, b, s):
      return jnp.sum(
        jnp.sin(jaxdnn.dot_product_attention(q, k, v, b, sinks=s, implementation=impl))
      )

    f = jax.shard_map(
      jax.grad(loss, argnums=(0, 1, 2, 3, 4)),
      mesh=_mesh(),
      in_specs=(P("data"),) * 3 + (P(), P()),
      out_specs=(P("data"),) * 3 + (P(), P()),
    )
    return jax.jit(f)(q, k, v, bias, sinks)

  for got, want in zip(grads(None), grads("xla")):
    assert got.shape == want.shape
    assert_close(got, want, 5e-5)


@needs_4
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_linear_cross_entropy_weight_gradients_in_shard_map(reduction):
  rng = np.random.default_rng(3)
  h, w, b = normal(rng, (16, 8)), normal(rng, (8, 50), scale=0.3), normal(rng, (50,))
  labels = jnp.asarray(rng.integers(0, 50, size=(16,)), jnp.int32)

  def grads(impl):
    def loss(h, w, b, labels):
      out = jaxdnn.linear_cross_entropy(
        h, w, labels, bias=b, reduction=reduction, implementation=impl
      )
      return jnp.sum(out)

    f = jax.shard_map(
      jax.grad(loss, argnums=(0, 1, 2)),
      mesh=_mesh(),
      in_specs=(P("data"), P(), P(), P("data")),
      out_specs=(P("data"), P(), P()),
    )
    return jax.jit(f)(h, w, b, labels)

  for got, want in zip(grads(None), grads("xla")):
    assert got.shape == want.shape
    assert_close(got, want, 5e-5)
