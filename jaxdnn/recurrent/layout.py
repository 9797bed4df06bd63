"""The recurrent weights' layout, and converters from and to PyTorch's and Flax's.

params: a tuple over layers of a tuple over directions (forward, then
reverse when bidirectional) of dicts
  w_ih [input, G * hidden], w_hh [hidden, G * hidden], b_ih [G * hidden], b_hh [G * hidden]
(x @ w_ih: PyTorch's weight_ih_l{k} transposed), the G gates in cuDNN's and
PyTorch's order: LSTM (i, f, g, o), GRU (r, z, n), plain RNN one. A layer
after the first takes the previous layer's output, directions concatenated:
input = directions * hidden.

The GRU is cuDNN's and PyTorch's (the reset gate applied after the
recurrent matmul: n = tanh(x W_in + b_in + r * (h W_hn + b_hn))), which is
also Flax's GRUCell: the two convert exactly, Flax's r and z biases going to
b_ih and zeros to b_hh.
"""

from __future__ import annotations

import numpy as np

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
_FLAX_GATES = {"lstm": ("i", "f", "g", "o"), "gru": ("r", "z", "n")}


def check_mode(mode):
  if mode not in GATES:
    raise ValueError(f"rnn: mode must be one of {sorted(GATES)}, got {mode!r}")
  return GATES[mode]


def init_params(
  key, mode, input_size, hidden_size, *, num_layers=1, bidirectional=False, dtype=None
):
  """PyTorch's initialisation (uniform in +-1/sqrt(hidden)) in this layout."""
  import jax
  import jax.numpy as jnp

  g = check_mode(mode)
  dirs = 2 if bidirectional else 1
  bound = 1.0 / np.sqrt(hidden_size)
  layers = []
  for layer in range(num_layers):
    fan_in = input_size if layer == 0 else dirs * hidden_size
    per_dir = []
    for _ in range(dirs):
      key, *k = jax.random.split(key, 5)
      shapes = dict(
        w_ih=(fan_in, g * hidden_size),
        w_hh=(hidden_size, g * hidden_size),
        b_ih=(g * hidden_size,),
        b_hh=(g * hidden_size,),
      )
      per_dir.append(
        {
          name: jax.random.uniform(kk, shape, dtype or jnp.float32, -bound, bound)
          for kk, (name, shape) in zip(k, shapes.items())
        }
      )
    layers.append(tuple(per_dir))
  return tuple(layers)


def from_torch(state_dict, mode, num_layers=1, bidirectional=False):
  """Params from an nn.LSTM / nn.GRU / nn.RNN state dict (name -> numpy array)."""
  check_mode(mode)
  layers = []
  for layer in range(num_layers):
    per_dir = []
    for suffix in ("", "_reverse")[: 2 if bidirectional else 1]:
      get = lambda name: np.asarray(state_dict[f"{name}_l{layer}{suffix}"])
      per_dir.append(
        dict(
          w_ih=get("weight_ih").T,
          w_hh=get("weight_hh").T,
          b_ih=get("bias_ih"),
          b_hh=get("bias_hh"),
        )
      )
    layers.append(tuple(per_dir))
  return tuple(layers)


def to_torch(params):
  """The state dict nn.LSTM / nn.GRU / nn.RNN loads (numpy arrays)."""
  out = {}
  for layer, per_dir in enumerate(params):
    for d, p in enumerate(per_dir):
      suffix = f"_l{layer}" + ("_reverse" if d else "")
      out["weight_ih" + suffix] = np.asarray(p["w_ih"]).T
      out["weight_hh" + suffix] = np.asarray(p["w_hh"]).T
      out["bias_ih" + suffix] = np.asarray(p["b_ih"])
      out["bias_hh" + suffix] = np.asarray(p["b_hh"])
  return out


def from_flax_cell(cell_params, mode):
  """One (layer, direction)'s params from Flax's OptimizedLSTMCell / LSTMCell
  (mode "lstm") or GRUCell (mode "gru") params (the dict under "params")."""
  gates = _FLAX_GATES.get(mode)
  if gates is None:
    raise ValueError(f"rnn: Flax cells convert for 'lstm' and 'gru', not {mode!r}")
  p = cell_params.get("params", cell_params)
  cat = lambda parts: np.concatenate([np.asarray(a) for a in parts], axis=-1)
  hidden = np.asarray(p["h" + gates[0]]["kernel"]).shape[0]
  zeros = np.zeros(hidden, np.asarray(p["h" + gates[0]]["kernel"]).dtype)
  if mode == "lstm":  # the input denses have no bias, the recurrent ones do
    return dict(
      w_ih=cat(p["i" + g]["kernel"] for g in gates),
      w_hh=cat(p["h" + g]["kernel"] for g in gates),
      b_ih=cat(zeros for _ in gates),
      b_hh=cat(p["h" + g]["bias"] for g in gates),
    )
  # GRU: input denses have biases; of the recurrent ones only hn has one.
  return dict(
    w_ih=cat(p["i" + g]["kernel"] for g in gates),
    w_hh=cat(p["h" + g]["kernel"] for g in gates),
    b_ih=cat(p["i" + g]["bias"] for g in gates),
    b_hh=cat((zeros, zeros, p["hn"]["bias"])),
  )
