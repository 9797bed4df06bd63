"""jaxdnn.flax.RNN: a stand-in for flax.nnx.RNN that runs jaxdnn.rnn.

  flax.nnx.RNN(nnx.OptimizedLSTMCell(features, hidden, rngs=rngs))
  jaxdnn.flax.RNN(nnx.OptimizedLSTMCell(features, hidden, rngs=rngs))

The same constructor and call (inputs, initial_carry, seq_lengths,
return_carry, time_major, reverse, keep_order, rngs) and the same state: the
cell is kept as it is (its parameters, nnx.RNN's carry RNG stream beside it),
so nnx.state trees, checkpoints and trained weights carry over both ways;
nnx.Bidirectional takes it. Cells: OptimizedLSTMCell and LSTMCell (mode
"lstm"), GRUCell ("gru": Flax's GRU is cuDNN's, reset gate after the
recurrent matmul, see jaxdnn.recurrent.layout), SimpleCell with tanh or relu
and no residual; their default gate and activation functions (others are
refused). Each call converts the cell's parameters with layout.cell_params
(concatenations, differentiable), so gradients reach the cell's own.

Differences, by design: with seq_lengths, outputs at or past an example's
length are zeros (nnx.RNN keeps running the cell over the padding), and a
length-0 example's carry is the initial one (nnx.RNN returns its last
step's); the computation runs in float32 with outputs and carry in the
computation dtype (cell.dtype, or Flax's promotion of inputs and
parameters); `unroll`, `state_axes` and `broadcast_rngs` have no scan to
shape and are accepted and ignored.
"""

from __future__ import annotations

import inspect

import jax.numpy as jnp
from flax import nnx

from jaxdnn.recurrent.api import rnn
from jaxdnn.recurrent.layout import cell_params
from jaxdnn.recurrent.reference import _reverse_valid


def _mode(cell):
  """jaxdnn.rnn's mode for a Flax cell, or a ValueError naming what differs."""
  default = lambda name: inspect.signature(type(cell).__init__).parameters[name].default
  same = lambda name: getattr(cell, name, None) is default(name)
  if isinstance(cell, (nnx.OptimizedLSTMCell, nnx.LSTMCell, nnx.GRUCell)):
    if same("gate_fn") and same("activation_fn"):
      return "gru" if isinstance(cell, nnx.GRUCell) else "lstm"
    raise ValueError(f"jaxdnn.flax.RNN: {type(cell).__name__} with its default gate_fn and "
                     "activation_fn only (sigmoid, tanh)")  # fmt: skip
  if isinstance(cell, nnx.SimpleCell) and not cell.residual:
    if same("activation_fn"):
      return "rnn_tanh"
    if cell.activation_fn is nnx.relu:
      return "rnn_relu"
  raise ValueError(
    "jaxdnn.flax.RNN: the cell must be an nnx OptimizedLSTMCell, LSTMCell, GRUCell or "
    f"SimpleCell (tanh or relu, not residual), got {type(cell).__name__}"
  )


class RNN(nnx.Module):
  """flax.nnx.RNN's interface over jaxdnn.rnn (see the module docstring);
  `implementation` is jaxdnn.rnn's."""

  def __init__(
    self,
    cell,
    *,
    time_major=False,
    return_carry=False,
    reverse=False,
    keep_order=False,
    unroll=1,
    state_axes=None,
    broadcast_rngs=None,
    rngs=True,
    implementation=None,
  ):
    del unroll, state_axes, broadcast_rngs  # no scan to shape
    self.mode = _mode(cell)
    self.cell = cell
    self.time_major = time_major
    self.return_carry = return_carry
    self.reverse = reverse
    self.keep_order = keep_order
    self.implementation = implementation
    # nnx.RNN's carry stream, so the two modules hold the same state.
    if rngs is True:
      self.rngs = nnx.RngStream(0, tag="carry")
    elif isinstance(rngs, nnx.Rngs):
      self.rngs = rngs.carry.fork()
    elif rngs is False:
      self.rngs = nnx.data(None)
    else:
      raise ValueError(f"jaxdnn.flax.RNN: rngs must be an nnx.Rngs or a bool, got {type(rngs)}")

  def __call__(
    self,
    inputs,
    *,
    initial_carry=None,
    seq_lengths=None,
    return_carry=None,
    time_major=None,
    reverse=None,
    keep_order=None,
    rngs=None,
  ):
    pick = lambda given, own: own if given is None else given
    return_carry = pick(return_carry, self.return_carry)
    time_major = pick(time_major, self.time_major)
    reverse, keep_order = pick(reverse, self.reverse), pick(keep_order, self.keep_order)
    params = cell_params(nnx.to_pure_dict(nnx.state(self.cell, nnx.Param)), self.mode, jnp)
    dtype = self.cell.dtype or jnp.result_type(inputs, *params.values())
    # [time, batch, features], any leading batch dims folded into one.
    xs = jnp.asarray(inputs, dtype)
    xs = xs if time_major else jnp.moveaxis(xs, -2, 0)
    batch_shape = xs.shape[1:-1]
    xs = xs.reshape(xs.shape[:1] + (-1,) + xs.shape[-1:])
    lengths = None if seq_lengths is None else jnp.asarray(seq_lengths).reshape(-1)
    full = lambda: jnp.full((xs.shape[1],), xs.shape[0], jnp.int32)
    if reverse:  # Flax reverses each example's valid steps and runs forward
      xs = _reverse_valid(xs, full() if lengths is None else lengths)
    if initial_carry is None:
      rngs = self.rngs if rngs is None else rngs
      initial_carry = self.cell.initialize_carry(batch_shape + xs.shape[-1:], rngs)
    flat = lambda c: jnp.asarray(c).reshape((1, -1, c.shape[-1]))
    if self.mode == "lstm":  # Flax's carry is (c, h), jaxdnn's (h, c)
      state = (flat(initial_carry[1]), flat(initial_carry[0]))
    else:
      state = flat(initial_carry)
    out, final = rnn(
      xs,
      (({k: v.astype(dtype) for k, v in params.items()},),),
      mode=self.mode,
      seq_lengths=lengths,
      initial_state=state,
      time_major=True,
      implementation=self.implementation,
    )
    if reverse and keep_order:
      out = _reverse_valid(out, full() if lengths is None else lengths)
    out = out.reshape(out.shape[:1] + batch_shape + out.shape[-1:])
    out = out if time_major else jnp.moveaxis(out, 0, -2)
    if not return_carry:
      return out
    unflat = lambda s: s[0].reshape(batch_shape + s.shape[-1:])
    carry = (unflat(final[1]), unflat(final[0])) if self.mode == "lstm" else unflat(final)
    return carry, out
