"""The recurrent fuzz table (tests/fuzz): invalid and edge-case arguments of
jaxdnn.rnn, against a float64 numpy recurrence (every example stepped on its
own, the reverse direction from its last valid step)."""

import jax
import jax.numpy as jnp
import numpy as np
from fuzz_base import FuzzOp, rand

import jaxdnn
from jaxdnn.recurrent.layout import init_params


def _sig(v):
  return 1.0 / (1.0 + np.exp(-v))


def _step(mode, gx, q, h, c):
  hid = h.shape[-1]
  if mode == "lstm":
    i, f, g, o = (
      (gx + q)[:hid],
      (gx + q)[hid : 2 * hid],
      (gx + q)[2 * hid : 3 * hid],
      (gx + q)[3 * hid :],
    )
    c = _sig(f) * c + _sig(i) * np.tanh(g)
    return _sig(o) * np.tanh(c), c
  if mode == "gru":
    r = _sig(gx[:hid] + q[:hid])
    z = _sig(gx[hid : 2 * hid] + q[hid : 2 * hid])
    n = np.tanh(gx[2 * hid :] + r * q[2 * hid :])
    return (1 - z) * n + z * h, c
  a = gx + q
  return (np.tanh(a) if mode == "rnn_tanh" else np.maximum(a, 0.0)), c


def rnn_oracle(
  x, params, *, mode="lstm", seq_lengths=None, initial_state=None, time_major=False, **_
):
  xs = np.asarray(x, np.float64)
  xs = xs if time_major else xs.swapaxes(0, 1)
  steps, batch = xs.shape[:2]
  hid, dirs = np.shape(params[0][0]["w_hh"])[0], len(params[0])
  lengths = (
    np.full(batch, steps) if seq_lengths is None else np.clip(np.asarray(seq_lengths), 0, steps)
  )
  n = len(params) * dirs
  if initial_state is None:
    h0, c0 = np.zeros((n, batch, hid)), np.zeros((n, batch, hid))
  elif mode == "lstm":
    h0, c0 = (np.asarray(s, np.float64) for s in initial_state)
  else:
    h0, c0 = np.asarray(initial_state, np.float64), np.zeros((n, batch, hid))
  layer_in, hs, cs = xs, [], []
  for li, layer in enumerate(params):
    outs = []
    for d, p in enumerate(layer):
      p = {k: np.asarray(v, np.float64) for k, v in p.items()}
      k = li * dirs + d
      out, h, c = np.zeros((steps, batch, hid)), h0[k].copy(), c0[k].copy()
      for b in range(batch):
        order = range(lengths[b]) if d == 0 else range(lengths[b] - 1, -1, -1)
        for t in order:
          gx = layer_in[t, b] @ p["w_ih"] + p["b_ih"]
          h[b], c[b] = _step(mode, gx, h[b] @ p["w_hh"] + p["b_hh"], h[b], c[b])
          out[t, b] = h[b]
      outs.append(out)
      hs.append(h)
      cs.append(c)
    layer_in = np.concatenate(outs, axis=-1)
  out = layer_in if time_major else layer_in.swapaxes(0, 1)
  parts = [out, np.stack(hs)] + ([np.stack(cs)] if mode == "lstm" else [])
  dtype = jnp.asarray(x).dtype
  return np.concatenate(
    [np.asarray(jnp.asarray(a, jnp.float32).astype(dtype), np.float64).ravel() for a in parts]
  )


def _flat(x, params, **kw):
  out, state = jaxdnn.rnn(x, params, **kw)
  return jnp.concatenate([a.astype(jnp.float32).ravel() for a in [out, *jax.tree.leaves(state)]])


def cases(impl):
  params = init_params(jax.random.key(0), "lstm", 3, 4, num_layers=2, bidirectional=True)
  gru = init_params(jax.random.key(1), "gru", 3, 4)
  x = rand((2, 5, 3))
  base = dict(x=x, params=params, mode="lstm", seq_lengths=jnp.array([5, 2], jnp.int32))
  out = []

  def add(name, arg, **changes):
    out.append((name, arg, base | changes))

  for bad, label in ((None, "none"), ("x", "str"), (3.0, "scalar")):
    add(f"x {label}", "x", x=bad)
  add("x int32", "x", x=jnp.ones((2, 5, 3), jnp.int32))
  add("x bfloat16", "x", x=x.astype(jnp.bfloat16))
  add("x float16", "x", x=x.astype(jnp.float16))
  add("x float64", "x", x=x.astype(jnp.float64))
  add("x rank 2", "x", x=x[0])
  add("x nan", "x", x=x.at[0, 1, 1].set(jnp.nan))
  add("x time-major", "x", x=jnp.swapaxes(x, 0, 1), time_major=True)
  add("mode bad", "mode", mode="LSTM")
  add("mode none", "mode", mode=None)
  add("mode gru", "mode", mode="gru", params=gru)
  add("params none", "params", params=None)
  add("params empty", "params", params=())
  add(
    "params missing w_hh",
    "params",
    params=(({k: v for k, v in gru[0][0].items() if k != "w_hh"},),),
    mode="gru",
  )
  add("params wrong mode", "params", params=gru)
  add("seq_lengths float", "seq_lengths", seq_lengths=jnp.array([5.0, 2.0]))
  add("seq_lengths wrong shape", "seq_lengths", seq_lengths=jnp.array([5, 2, 1]))
  add("seq_lengths negative", "seq_lengths", seq_lengths=jnp.array([-3, 2]))
  add("seq_lengths past the end", "seq_lengths", seq_lengths=jnp.array([9, 5]))
  add("seq_lengths int64 huge", "seq_lengths", seq_lengths=jnp.array([2**40, 1], jnp.int64))
  add("seq_lengths bool", "seq_lengths", seq_lengths=jnp.array([True, False]))
  add("seq_lengths zeros", "seq_lengths", seq_lengths=jnp.array([0, 0]))
  add(
    "initial_state wrong shape",
    "initial_state",
    initial_state=(jnp.zeros((4, 2, 3)), jnp.zeros((4, 2, 3))),
  )
  add("initial_state not a pair", "initial_state", initial_state=jnp.zeros((4, 2, 4)))
  add("initial_state given", "initial_state", initial_state=(rand((4, 2, 4)), rand((4, 2, 4))))
  add("num_layers wrong", "num_layers", num_layers=1)
  add("bidirectional wrong", "bidirectional", bidirectional=False)
  add("dropout_rate negative", "dropout_rate", dropout_rate=-0.1)
  add("dropout_rate one", "dropout_rate", dropout_rate=1.0, dropout_rng=jax.random.key(0))
  add("dropout_rate nan", "dropout_rate", dropout_rate=float("nan"), dropout_rng=jax.random.key(0))
  add("dropout_rate without key", "dropout_rate", dropout_rate=0.5)
  add("implementation bad", "implementation", implementation="triton")
  return out


FUZZ_OPS = {
  "rnn": FuzzOp(
    cases=cases,
    inputs=("x", "params"),
    fn=_flat,
    oracle=rnn_oracle,
    aliases={"x": "floating-point"},
  ),
}
