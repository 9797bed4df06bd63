"""The recurrent layers' plain-JAX oracle and weight layout (issue 28's
groundwork): Flax's cells, packed-sequence semantics, directions and layers,
the PyTorch converter, gradients and errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import assert_close, normal
from jax.test_util import check_grads

from jaxdnn.recurrent import layout
from jaxdnn.recurrent.reference import rnn_reference

MODES = ["lstm", "gru", "rnn_tanh", "rnn_relu"]


@pytest.fixture
def rng(request):
  return np.random.default_rng(abs(hash(request.node.nodeid)) % 2**32)


def setup(rng, mode, batch=3, steps=7, features=5, hidden=4, **kw):
  params = layout.init_params(
    jax.random.key(int(rng.integers(1 << 30))), mode, features, hidden, **kw
  )
  return normal(rng, (batch, steps, features)), params


@pytest.mark.parametrize(
  "mode,cell", [("lstm", "OptimizedLSTMCell"), ("lstm", "LSTMCell"), ("gru", "GRUCell")]
)
def test_matches_flax_cells(rng, mode, cell):
  nn = pytest.importorskip("flax.linen")
  c = getattr(nn, cell)(6)
  x = normal(rng, (2, 9, 5))
  carry = c.initialize_carry(jax.random.key(0), x[:, 0].shape)
  fp = c.init(jax.random.key(1), carry, x[:, 0])
  want = []
  for t in range(x.shape[1]):
    carry, y = c.apply(fp, carry, x[:, t])
    want.append(y)
  params = ((jax.tree.map(jnp.asarray, layout.from_flax_cell(fp, mode)),),)
  out, state = rnn_reference(x, params, mode=mode)
  assert_close(out, jnp.stack(want, 1), 1e-5)
  h = state[0] if mode == "lstm" else state
  assert_close(h[0], want[-1], 1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_lengths_are_packed_sequences(rng, mode):
  x, params = setup(rng, mode, batch=4, bidirectional=True)
  lengths = jnp.array([7, 0, 1, 4])
  out, state = rnn_reference(x, params, mode=mode, seq_lengths=lengths)
  h = state[0] if mode == "lstm" else state
  for b, n in enumerate(np.asarray(lengths)):
    np.testing.assert_array_equal(out[b, n:], 0.0)
    if n == 0:
      np.testing.assert_array_equal(h[:, b], 0.0)
      continue
    alone, alone_state = rnn_reference(x[b : b + 1, :n], params, mode=mode)
    assert_close(out[b, :n], alone[0], 1e-5)
    ah = alone_state[0] if mode == "lstm" else alone_state
    assert_close(h[:, b], ah[:, 0], 1e-5)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_reverse_direction_reads_backwards(rng, mode):
  x, params = setup(rng, mode, bidirectional=True)
  out, _ = rnn_reference(x, params, mode=mode)
  back, _ = rnn_reference(x[:, ::-1], (params[0][1:],), mode=mode)
  assert_close(out[..., 4:], back[:, ::-1], 1e-5)
  fwd, _ = rnn_reference(x, (params[0][:1],), mode=mode)
  assert_close(out[..., :4], fwd, 1e-5)


def test_layers_stack_and_states_are_layer_major(rng):
  x, params = setup(rng, "lstm", num_layers=2)
  out, (h, c) = rnn_reference(x, params, mode="lstm")
  mid, (h0, c0) = rnn_reference(x, params[:1], mode="lstm")
  top, (h1, c1) = rnn_reference(mid, params[1:], mode="lstm")
  assert_close(out, top, 1e-5)
  assert_close(h, jnp.concatenate([h0, h1]), 1e-5)
  assert_close(c, jnp.concatenate([c0, c1]), 1e-5)


def test_initial_state_and_time_major(rng):
  x, params = setup(rng, "gru", num_layers=2, bidirectional=True)
  h0 = normal(rng, (4, 3, 4))
  out, h = rnn_reference(x, params, mode="gru", initial_state=h0)
  tout, th = rnn_reference(
    jnp.swapaxes(x, 0, 1), params, mode="gru", initial_state=h0, time_major=True
  )
  assert_close(jnp.swapaxes(tout, 0, 1), out, 1e-6)
  assert_close(th, h, 1e-6)
  cold, _ = rnn_reference(x, params, mode="gru")
  assert float(jnp.max(jnp.abs(cold - out))) > 1e-3  # the state was used


def test_bfloat16_keeps_float32_state(rng):
  x, params = setup(rng, "lstm", steps=64)
  out16, _ = rnn_reference(x.astype(jnp.bfloat16), params, mode="lstm")
  out32, _ = rnn_reference(x.astype(jnp.bfloat16).astype(jnp.float32), params, mode="lstm")
  assert out16.dtype == jnp.bfloat16
  assert_close(out16.astype(jnp.float32), out32, 1e-2)


def test_torch_state_dict_round_trip(rng):
  _, params = setup(rng, "gru", num_layers=2, bidirectional=True)
  sd = layout.to_torch(params)
  assert sd["weight_ih_l1_reverse"].shape == (12, 8)  # PyTorch's [G * hidden, input]
  back = layout.from_torch(sd, "gru", num_layers=2, bidirectional=True)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(back)):
    np.testing.assert_array_equal(np.asarray(a), b)


@pytest.mark.parametrize("mode", MODES)
def test_gradients(rng, mode):
  x, params = setup(rng, mode, batch=2, steps=3, features=3, hidden=2, bidirectional=True)
  lengths = jnp.array([3, 2])
  f = lambda x, params: jnp.sum(
    jnp.sin(rnn_reference(x, params, mode=mode, seq_lengths=lengths)[0])
  )
  check_grads(f, (x, params), order=1, modes=["rev"], atol=2e-2, rtol=2e-2)


def test_errors_name_the_argument(rng):
  x, params = setup(rng, "lstm")
  with pytest.raises(ValueError, match="mode must be one of"):
    rnn_reference(x, params, mode="lstmm")
  with pytest.raises(ValueError, match="x must be"):
    rnn_reference(x[0], params, mode="lstm")
  with pytest.raises(ValueError, match="seq_lengths"):
    rnn_reference(x, params, mode="lstm", seq_lengths=jnp.ones(3))
  with pytest.raises(ValueError, match="Flax cells convert"):
    layout.from_flax_cell({}, "rnn_tanh")
