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
also Flax's GRUCell, linen's and nnx's: they differ only in where the biases
sit (Flax has one bias for r and one for z; nnx.GRUCell has no b_hn), and
convert exactly. The other GRU, the reset gate applied before the matmul
(n = tanh(x W_in + (r * h) W_hn + b), Cho et al. 2014, Keras's
reset_after=False), is neither Flax's nor cuDNN's and is not provided.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
# Flax's per-gate dense layers: "i" + gate on the input, "h" + gate on the state.
_FLAX_GATES = {"lstm": ("i", "f", "g", "o"), "gru": ("r", "z", "n"), "rnn_tanh": ("",)}
_FLAX_GATES["rnn_relu"] = _FLAX_GATES["rnn_tanh"]


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


def _pure_params(cell):
  """A Flax cell's parameters as nested dicts of arrays: linen's variables
  (under "params"), an nnx cell or nnx.RNN, its nnx.State, or its pure dict."""
  if not isinstance(cell, Mapping) or hasattr(cell, "flat_state"):
    from flax import nnx  # only for nnx objects, which need it anyway

    state = cell if isinstance(cell, Mapping) else nnx.state(cell, nnx.Param)
    cell = nnx.to_pure_dict(state)
  for wrapper in ("params", "cell"):  # linen's variables, nnx.RNN's attribute
    if wrapper in cell and len(cell) == 1:
      cell = cell[wrapper]
  return cell


def cell_params(p, mode, xp=np):
  """from_flax_cell on a pure dict, in `xp` (numpy, or jax.numpy where the
  weights are traced: jaxdnn.flax.RNN)."""
  gates = _FLAX_GATES.get(mode)
  if gates is None or not isinstance(p, Mapping) or not p:
    raise ValueError(
      f"rnn: Flax cells convert for modes {sorted(_FLAX_GATES)} from a cell's parameters, "
      f"got mode {mode!r} and {type(p).__name__}"
    )

  def dense(name):  # (kernel, bias), a missing bias as zeros; nnx spells "if" "if_"
    d = p[name] if name in p else p[name + "_"]
    k = xp.asarray(d["kernel"])
    return k, (xp.asarray(d["bias"]) if "bias" in d else xp.zeros(k.shape[-1], k.dtype))

  if "dense_i" in p:  # nnx's fused cells: one dense a side for every gate
    side_i, side_h = [dense("dense_i")], [dense("dense_h")]
  else:  # one dense per gate and side
    side_i = [dense("i" + g) for g in gates]
    side_h = [dense("h" + g) for g in gates]
  cat = lambda parts: xp.concatenate(parts, axis=-1)
  return dict(
    w_ih=cat([k for k, _ in side_i]),
    w_hh=cat([k for k, _ in side_h]),
    b_ih=cat([b for _, b in side_i]),
    b_hh=cat([b for _, b in side_h]),
  )


def from_flax_cell(cell, mode):
  """One (layer, direction)'s params (numpy) from a Flax cell's parameters:
  OptimizedLSTMCell or LSTMCell (mode "lstm"), GRUCell ("gru"), SimpleCell
  ("rnn_tanh", or "rnn_relu" for activation_fn=relu; not residual=True),
  linen's (the variables, or the dict under "params") or nnx's (the cell, an
  nnx.RNN, or nnx.state(cell, nnx.Param), pure or not). Exact: a bias Flax
  leaves out is zeros here."""
  return cell_params(_pure_params(cell), mode)


def to_flax_cell(p, mode, flavor="nnx"):
  """A Flax cell's parameters (a pure dict of numpy arrays) from one
  (layer, direction) of params:

    flavor="nnx": nnx.OptimizedLSTMCell, nnx.GRUCell, nnx.SimpleCell
      (load with nnx.replace_by_pure_dict(state, d) then nnx.update);
    "nnx.LSTMCell": nnx.LSTMCell (a dense per gate);
    "linen": linen's LSTMCell / OptimizedLSTMCell / GRUCell / SimpleCell
      variables ({"params": ...}).

  Where PyTorch has two biases that add (every LSTM gate, the GRU's r and z,
  the plain RNN) Flax has one: it gets their sum, so the function is the
  same and from_flax_cell gives zeros for the other. The GRU's n gate keeps
  both (b_hn is multiplied by r), but nnx.GRUCell has no b_hn: a nonzero one
  is refused for flavor "nnx" ("linen"'s GRUCell has it).
  """
  g = check_mode(mode)
  if mode not in _FLAX_GATES or flavor not in ("nnx", "nnx.LSTMCell", "linen"):
    raise ValueError(f"rnn: no Flax cell for mode {mode!r} in flavor {flavor!r}")
  if flavor == "nnx.LSTMCell" and mode != "lstm":
    raise ValueError(f"rnn: flavor 'nnx.LSTMCell' is the LSTM's, not {mode!r}'s")
  split = lambda a: np.split(np.asarray(a), g, axis=-1)
  w_i, w_h, b_i, b_h = (split(p[k]) for k in ("w_ih", "w_hh", "b_ih", "b_hh"))
  summed = [a + b for a, b in zip(b_i, b_h)]
  # Flax's biases per gate, input side and recurrent side (None: no bias).
  if mode == "lstm":
    bias_i, bias_h = [None] * g, summed
  elif mode == "gru":
    bias_i, bias_h = summed[:2] + [b_i[2]], [None, None, b_h[2]]
  else:
    bias_i, bias_h = summed, [None]
  if flavor == "nnx":
    if mode == "gru":
      if np.any(b_h[2] != 0):
        raise ValueError(
          "rnn: nnx.GRUCell has no bias on h W_hn (b_hh's n part is nonzero): "
          "use flavor='linen' (linen.GRUCell has it) or jaxdnn.rnn directly"
        )
      bias_h = [None] * g
    out = {}
    for name, w, b in (("dense_i", w_i, bias_i), ("dense_h", w_h, bias_h)):
      out[name] = dict(kernel=np.concatenate(w, axis=-1))
      if b[0] is not None or b[-1] is not None:
        out[name]["bias"] = np.concatenate([np.zeros_like(b_i[0]) if x is None else x for x in b])
    return out
  gates = _FLAX_GATES[mode]
  out = {}
  for side, w, b in (("i", w_i, bias_i), ("h", w_h, bias_h)):
    for gate, wk, bk in zip(gates, w, b):
      name = "if_" if (side, gate, flavor) == ("i", "f", "nnx.LSTMCell") else side + gate
      out[name] = dict(kernel=wk) if bk is None else dict(kernel=wk, bias=bk)
  return {"params": out} if flavor == "linen" else out
