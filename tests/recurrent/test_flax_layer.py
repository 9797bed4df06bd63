"""jaxdnn.flax.RNN against flax.nnx.RNN over the same cell (the same
parameters): outputs, carries, per-example lengths, reverse, nnx.Bidirectional,
gradients, the same state tree; and the layout's Flax converters both ways."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import assert_close, normal

import jaxdnn
from jaxdnn.recurrent import layout

flax = pytest.importorskip("flax")
from flax import linen, nnx  # noqa: E402

CELLS = {
  "OptimizedLSTMCell": "lstm",
  "LSTMCell": "lstm",
  "GRUCell": "gru",
  "SimpleCell": "rnn_tanh",
}


@pytest.fixture(autouse=True)
def _full_float32_products():
  with jax.default_matmul_precision("highest"):
    yield


@pytest.fixture
def rng(request):
  return np.random.default_rng(abs(hash(request.node.nodeid)) % 2**32)


def _cell(name, features=5, hidden=6, seed=0):
  cell = getattr(nnx, name)(features, hidden, rngs=nnx.Rngs(seed))
  # Nonzero biases, so a bias in the wrong place shows.
  state = nnx.state(cell, nnx.Param)
  biased = jax.tree.map(
    lambda a: a + 0.3 * jnp.sin(jnp.arange(a.size).reshape(a.shape)), nnx.to_pure_dict(state)
  )
  nnx.replace_by_pure_dict(state, biased)
  nnx.update(cell, state)
  return cell


@pytest.mark.parametrize("name", CELLS)
def test_same_outputs_and_carry_as_nnx_rnn(rng, name):
  cell = _cell(name)
  ours, ref = jaxdnn.flax.RNN(cell, return_carry=True), nnx.RNN(cell, return_carry=True)
  x = normal(rng, (3, 9, 5))
  carry, out = ours(x)
  want_carry, want = ref(x)
  assert out.shape == want.shape == (3, 9, 6)
  assert_close(out, want, 1e-5)
  jax.tree.map(lambda a, b: assert_close(a, b, 1e-5), carry, want_carry)
  # An initial carry, and the carry's (c, h) order for the LSTM.
  init = jax.tree.map(lambda c: normal(rng, c.shape), want_carry)
  got, want = ours(x, initial_carry=init), ref(x, initial_carry=init)
  jax.tree.map(lambda a, b: assert_close(a, b, 1e-5), got, want)


@pytest.mark.parametrize("name", ["OptimizedLSTMCell", "GRUCell"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_seq_lengths_match_on_valid_steps(rng, name, reverse):
  cell = _cell(name)
  x = normal(rng, (4, 8, 5))
  lengths = jnp.array([8, 1, 5, 3])
  kw = dict(seq_lengths=lengths, return_carry=True, reverse=reverse, keep_order=True)
  carry, out = jaxdnn.flax.RNN(cell)(x, **kw)
  want_carry, want = nnx.RNN(cell)(x, **kw)
  valid = (jnp.arange(8)[None, :] < lengths[:, None])[..., None]
  # Valid steps agree; past its length an example's outputs are zeros here
  # (nnx.RNN keeps running the cell over the padding).
  assert_close(jnp.where(valid, out, 0.0), jnp.where(valid, want, 0.0), 1e-5)
  assert float(jnp.max(jnp.abs(jnp.where(valid, 0.0, out)))) == 0.0
  jax.tree.map(lambda a, b: assert_close(a, b, 1e-5), carry, want_carry)


def test_bidirectional_batch_dims_and_time_major(rng):
  fwd, bwd = _cell("GRUCell", seed=1), _cell("GRUCell", seed=2)
  ours = nnx.Bidirectional(jaxdnn.flax.RNN(fwd), jaxdnn.flax.RNN(bwd))
  ref = nnx.Bidirectional(nnx.RNN(fwd), nnx.RNN(bwd))
  x = normal(rng, (3, 7, 5))
  lengths = jnp.array([7, 2, 4])
  got, want = ours(x, seq_lengths=lengths), ref(x, seq_lengths=lengths)
  valid = (jnp.arange(7) < lengths[..., None])[..., None]
  assert got.shape == want.shape == (3, 7, 12)
  assert_close(jnp.where(valid, got, 0.0), jnp.where(valid, want, 0.0), 1e-5)
  # Two batch dims (nnx.RNN selects a carry by length for one only).
  x2 = normal(rng, (2, 3, 7, 5))
  carry, out = jaxdnn.flax.RNN(fwd, return_carry=True)(x2)
  want_carry, want = nnx.RNN(fwd, return_carry=True)(x2)
  assert_close(out, want, 1e-5)
  assert_close(carry, want_carry, 1e-5)
  xt = jnp.moveaxis(x, 1, 0)  # time-major
  assert_close(jaxdnn.flax.RNN(fwd, time_major=True)(xt), nnx.RNN(fwd, time_major=True)(xt), 1e-5)


@pytest.mark.parametrize("name", ["OptimizedLSTMCell", "LSTMCell", "GRUCell"])
def test_gradients_reach_the_cells_parameters(rng, name):
  x = normal(rng, (2, 6, 5))
  lengths = jnp.array([6, 4])

  def grads(wrapper):
    model = wrapper(_cell(name))
    loss = lambda m: jnp.sum(jnp.sin(m(x, seq_lengths=lengths, return_carry=True)[0][-1]))
    return nnx.to_pure_dict(nnx.grad(loss)(model))

  got, want = grads(jaxdnn.flax.RNN), grads(nnx.RNN)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  jax.tree.map(lambda a, b: assert_close(a, b, 1e-4), got, want)


def test_same_state_tree_as_nnx_rnn():
  ours, ref = jaxdnn.flax.RNN(_cell("GRUCell")), nnx.RNN(_cell("GRUCell"))
  shapes = lambda m: jax.tree.map(jnp.shape, nnx.to_pure_dict(nnx.state(m)))
  assert shapes(ours) == shapes(ref)
  nnx.update(ours, nnx.state(ref))  # a checkpoint of one loads into the other
  x = jnp.ones((1, 4, 5))
  assert_close(ours(x), ref(x), 1e-5)


def test_unsupported_cells_are_refused():
  with pytest.raises(ValueError, match="default gate_fn"):
    jaxdnn.flax.RNN(nnx.GRUCell(3, 4, gate_fn=jax.nn.hard_sigmoid, rngs=nnx.Rngs(0)))
  with pytest.raises(ValueError, match="not residual"):
    jaxdnn.flax.RNN(nnx.SimpleCell(3, 3, residual=True, rngs=nnx.Rngs(0)))


@pytest.mark.parametrize(
  "mode,flavor,cell",
  [
    ("lstm", "nnx", lambda: nnx.OptimizedLSTMCell(5, 6, rngs=nnx.Rngs(0))),
    ("lstm", "nnx.LSTMCell", lambda: nnx.LSTMCell(5, 6, rngs=nnx.Rngs(0))),
    ("gru", "nnx", lambda: nnx.GRUCell(5, 6, rngs=nnx.Rngs(0))),
    ("rnn_tanh", "nnx", lambda: nnx.SimpleCell(5, 6, rngs=nnx.Rngs(0))),
  ],
)
def test_weights_go_to_flax_and_run_the_same(rng, mode, flavor, cell):
  params = layout.init_params(jax.random.key(3), mode, 5, 6)
  if mode == "gru":  # nnx.GRUCell has no b_hn: PyTorch-initialised weights have one
    with pytest.raises(ValueError, match="no bias on h W_hn"):
      layout.to_flax_cell(params[0][0], mode, flavor)
    params = ((dict(params[0][0], b_hh=params[0][0]["b_hh"].at[12:].set(0.0)),),)
  c = cell()
  state = nnx.state(c, nnx.Param)
  nnx.replace_by_pure_dict(state, layout.to_flax_cell(params[0][0], mode, flavor))
  nnx.update(c, state)
  x = normal(rng, (2, 7, 5))
  assert_close(nnx.RNN(c)(x), jaxdnn.rnn(x, params, mode=mode)[0], 1e-5)
  back = ((jax.tree.map(jnp.asarray, layout.from_flax_cell(c, mode)),),)
  assert_close(jaxdnn.rnn(x, back, mode=mode)[0], jaxdnn.rnn(x, params, mode=mode)[0], 1e-5)


@pytest.mark.parametrize("mode,cell", [("lstm", "OptimizedLSTMCell"), ("gru", "GRUCell")])
def test_linen_cells_take_converted_weights(rng, mode, cell):
  params = layout.init_params(jax.random.key(4), mode, 5, 6)  # GRU with b_hn: linen has it
  variables = layout.to_flax_cell(params[0][0], mode, "linen")
  x = normal(rng, (2, 7, 5))
  out = linen.RNN(getattr(linen, cell)(6)).apply({"params": {"cell": variables["params"]}}, x)
  assert_close(out, jaxdnn.rnn(x, params, mode=mode)[0], 1e-5)
