"""The recurrent layers in plain JAX: the oracle the kernels will be tested
against (and, until they land, the only implementation).

  outputs, state = rnn_reference(x, params, mode=..., seq_lengths=None,
                                 initial_state=None, time_major=False)

x [batch, time, features] ([time, batch, features] with time_major); params
in jaxdnn.recurrent.layout's layout; outputs [batch, time, directions * hidden];
state h [layers * directions, batch, hidden] in PyTorch's order (layer-major,
forward before reverse), and for the LSTM the pair (h, c). With seq_lengths
[batch], steps at or past an example's length leave its state alone and
output zeros, and the reverse direction starts at the example's last valid
step: PyTorch's packed-sequence semantics. Gates, states and sums in
float32; outputs and states in x's dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdnn._primitive import vary_like
from jaxdnn.recurrent.layout import check_mode


def _cell(mode):
  """step(carry, projected input x_t W_ih + b_ih, p) -> new carry; carry = (h, c) or (h,)."""
  if mode == "lstm":

    def step(carry, gx, p):
      h, c = carry
      i, f, g, o = jnp.split(gx + h @ p["w_hh"] + p["b_hh"], 4, axis=-1)
      c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
      return jax.nn.sigmoid(o) * jnp.tanh(c), c

  elif mode == "gru":

    def step(carry, gx, p):
      (h,) = carry
      xr, xz, xn = jnp.split(gx, 3, axis=-1)
      hr, hz, hn = jnp.split(h @ p["w_hh"] + p["b_hh"], 3, axis=-1)
      r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
      n = jnp.tanh(xn + r * hn)
      return ((1.0 - z) * n + z * h,)

  else:
    act = jnp.tanh if mode == "rnn_tanh" else jax.nn.relu

    def step(carry, gx, p):
      (h,) = carry
      return (act(gx + h @ p["w_hh"] + p["b_hh"]),)

  return step


def _reverse_valid(a, lengths):
  """a [time, batch, ...] with each example's first lengths[b] steps reversed
  (the rest in place): its own inverse."""
  t = jnp.arange(a.shape[0])[:, None]
  idx = jnp.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)
  return jnp.take_along_axis(a, idx.reshape(idx.shape + (1,) * (a.ndim - 2)), axis=0)


def _direction(x, p, mode, lengths, carry0, reverse):
  """One direction of one layer over x [time, batch, features] (float32)."""
  if reverse:
    x = _reverse_valid(x, lengths)
  gx = x @ p["w_ih"] + p["b_ih"]  # every step's input projection at once
  step = _cell(mode)
  steps = jnp.arange(x.shape[0])

  def body(carry, inp):
    g, t = inp
    new = step(carry, g, p)
    valid = (t < lengths)[:, None]
    carry = tuple(jnp.where(valid, n, o) for n, o in zip(new, carry))
    return carry, jnp.where(valid, carry[0], 0.0)

  carry0 = tuple(vary_like(c, gx) for c in carry0)  # inside shard_map: as the data varies
  carry, out = jax.lax.scan(body, carry0, (gx, steps))
  if reverse:
    out = _reverse_valid(out, lengths)
  return out, carry


def check_call(x, params, mode, seq_lengths, initial_state, time_major):
  """Validates the call; -> (time-major float32 x, lengths [batch] int32,
  initial states (one or two [layers * dirs, batch, hidden] float32), dirs)."""
  check_mode(mode)
  if getattr(x, "ndim", None) != 3:
    raise ValueError(f"rnn: x must be [batch, time, features], got shape {getattr(x, 'shape', x)}")
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise ValueError(f"rnn: x must be a floating-point array, got {x.dtype}")
  if not isinstance(params, (tuple, list)) or not params:
    raise ValueError("rnn: params must be a tuple over layers of one or two directions' dicts")
  if any(not isinstance(layer, (tuple, list)) or len(layer) not in (1, 2) for layer in params):
    raise ValueError("rnn: params must be a tuple over layers of one or two directions' dicts")
  dirs = len(params[0])
  if any(len(layer) != dirs for layer in params):
    raise ValueError("rnn: every layer of params must have the same number of directions")
  names = ("w_ih", "w_hh", "b_ih", "b_hh")
  for li, layer in enumerate(params):
    for p in layer:
      if not isinstance(p, dict) or any(n not in p for n in names):
        raise ValueError(f"rnn: params[{li}] must hold dicts with {', '.join(names)}")
  xs = x if time_major else jnp.swapaxes(x, 0, 1)
  steps, batch = xs.shape[:2]
  hidden = params[0][0]["w_hh"].shape[0]
  gates = check_mode(mode)
  for li, layer in enumerate(params):
    fan_in = xs.shape[-1] if li == 0 else dirs * hidden
    for p in layer:
      want = dict(w_ih=(fan_in, gates * hidden), w_hh=(hidden, gates * hidden))
      want.update(b_ih=(gates * hidden,), b_hh=(gates * hidden,))
      for name, shape in want.items():
        if name not in p or tuple(p[name].shape) != shape:
          got = tuple(p[name].shape) if name in p else "missing"
          raise ValueError(f"rnn: params[{li}] {name} must have shape {shape}, got {got}")
  if seq_lengths is None:
    lengths = jnp.full((batch,), steps, jnp.int32)
  else:
    lengths = jnp.asarray(seq_lengths)
    if lengths.shape != (batch,) or not jnp.issubdtype(lengths.dtype, jnp.integer):
      raise ValueError(
        f"rnn: seq_lengths must be integers of shape ({batch},), got {lengths.dtype}{lengths.shape}"
      )
    lengths = jnp.clip(lengths, 0, steps).astype(jnp.int32)
  n_state = 2 if mode == "lstm" else 1
  full = (len(params) * dirs, batch, hidden)
  if initial_state is None:
    init = [jnp.zeros(full, jnp.float32)] * n_state
  else:
    init = list(initial_state) if mode == "lstm" else [initial_state]
    if len(init) != n_state or any(tuple(jnp.shape(s)) != full for s in init):
      what = "a pair (h, c)" if mode == "lstm" else "h"
      raise ValueError(f"rnn: initial_state must be {what} of shape {full}")
    init = [jnp.asarray(s).astype(jnp.float32) for s in init]
  return xs.astype(jnp.float32), lengths, init, dirs


def run_layers(xs, params, mode, lengths, init, dirs, direction, between=None):
  """The layers over time-major float32 xs: direction(x, p, carry0, reverse)
  -> (out, carry) runs one direction; between(layer_index, out) -> out runs
  between layers (dropout). -> (outputs, final states list)."""
  n_state = len(init)
  layer_in = xs
  finals = [[] for _ in range(n_state)]
  for li, layer in enumerate(params):
    outs = []
    for d, p in enumerate(layer):
      k = li * dirs + d
      out, carry = direction(
        layer_in,
        jax.tree.map(lambda a: jnp.asarray(a).astype(jnp.float32), p),
        tuple(s[k] for s in init),
        d == 1,
      )
      outs.append(out)
      for j in range(n_state):
        finals[j].append(carry[j])
    layer_in = jnp.concatenate(outs, axis=-1)
    if between is not None and li + 1 < len(params):
      layer_in = between(li, layer_in)
  return layer_in, finals


def rnn_reference(x, params, *, mode, seq_lengths=None, initial_state=None, time_major=False):
  xs, lengths, init, dirs = check_call(x, params, mode, seq_lengths, initial_state, time_major)

  def direction(layer_in, p, carry0, reverse):
    return _direction(layer_in, p, mode, lengths, carry0, reverse)

  out, finals = run_layers(xs, params, mode, lengths, init, dirs, direction)
  out = out.astype(x.dtype)
  out = out if time_major else jnp.swapaxes(out, 0, 1)
  states = tuple(jnp.stack(f).astype(x.dtype) for f in finals)
  return out, (states if mode == "lstm" else states[0])
