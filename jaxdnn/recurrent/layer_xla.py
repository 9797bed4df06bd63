"""The primitives' computation in plain JAX, result for result (what the CPU
kernel computes, cpp/recurrent/cpu/rnn_kernels.cc): the vmap rule's path for
per-example weights. Time-major, float32, one direction of one layer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _gates(mode, gx, q, h):
  """(new h, new c or None, saved per-step values) from the projected input
  gx, the recurrent product q = h W_hh + b_hh and the state h."""
  if mode == "lstm":
    i, f, g, o = jnp.split(gx + q, 4, axis=-1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
    return (o, f, i, g), jnp.concatenate([i, f, g, o], axis=-1)
  if mode == "gru":
    xr, xz, xn = jnp.split(gx, 3, axis=-1)
    hr, hz, hn = jnp.split(q, 3, axis=-1)
    r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
    n = jnp.tanh(xn + r * hn)
    return (1.0 - z) * n + z * h, jnp.concatenate([r, z, n, hn], axis=-1)
  a = gx + q
  return (jnp.tanh(a) if mode == "rnn_tanh" else jax.nn.relu(a)), jnp.zeros(
    a.shape[:-1] + (0,), a.dtype
  )


def forward(mode, gx, w_hh, b_hh, h0, c0, lengths):
  """-> out, h_n, c_n, saved, c_seq (the LSTM's c_n / c_seq, else empty)."""
  lstm = mode == "lstm"

  def body(carry, inp):
    h, c = carry
    g, t = inp
    valid = (t < lengths)[:, None]
    q = h @ w_hh + b_hh
    new, saved = _gates(mode, g, q, h)
    if lstm:
      o, f, i, gg = new
      c_new = f * c + i * gg
      h_new = o * jnp.tanh(c_new)
    else:
      h_new, c_new = new, c
    h = jnp.where(valid, h_new, h)
    c = jnp.where(valid, c_new, c)
    return (h, c), (jnp.where(valid, h, 0.0), jnp.where(valid, saved, 0.0), c)

  c_init = c0 if lstm else jnp.zeros_like(h0)
  steps = jnp.arange(gx.shape[0])
  (h, c), (out, saved, c_seq) = jax.lax.scan(body, (h0, c_init), (gx, steps))
  empty = jnp.zeros((0,), jnp.float32)
  return out, h, (c if lstm else empty), saved, (c_seq if lstm else empty)


def backward(mode, dout, dh_n, dc_n, w_hh, h0, c0, lengths, out, saved, c_seq):
  """-> dgx, dh0, dc0 (the LSTM's dc0, else empty); the weight gradients
  are weight_grads' (one GEMM over all steps)."""
  lstm, gru = mode == "lstm", mode == "gru"
  steps = out.shape[0]
  h_prev = jnp.concatenate([h0[None], out[:-1]], axis=0)
  c_prev = jnp.concatenate([c0[None], c_seq[:-1]], axis=0) if lstm else None

  def body(carry, inp):
    dh, dc = carry
    t = inp["t"]
    valid = (t < lengths)[:, None]
    d = dh + inp["dout"]
    direct = jnp.zeros_like(d)
    if lstm:
      i, f, g, o = jnp.split(inp["saved"], 4, axis=-1)
      tc = jnp.tanh(inp["c"])
      dct = dc + d * o * (1.0 - tc * tc)
      dq = jnp.concatenate(
        [
          dct * g * i * (1 - i),
          dct * inp["c_prev"] * f * (1 - f),
          dct * i * (1 - g * g),
          d * tc * o * (1 - o),
        ],
        axis=-1,
      )
      dgx, dc_new = dq, dct * f
    elif gru:
      r, z, n, hn = jnp.split(inp["saved"], 4, axis=-1)
      dan = d * (1 - z) * (1 - n * n)
      daz = d * (inp["h_prev"] - n) * z * (1 - z)
      dar = dan * hn * r * (1 - r)
      dgx = jnp.concatenate([dar, daz, dan], axis=-1)
      dq = jnp.concatenate([dar, daz, dan * r], axis=-1)
      direct, dc_new = d * z, dc
    else:
      h = inp["out"]
      da = d * (1 - h * h) if mode == "rnn_tanh" else jnp.where(h > 0, d, 0.0)
      dgx = dq = da
      dc_new = dc
    dq = jnp.where(valid, dq, 0.0)
    dh_new = jnp.where(valid, direct + dq @ w_hh.T, dh)
    dc = jnp.where(valid, dc_new, dc) if lstm else dc
    return (dh_new, dc), jnp.where(valid, dgx, 0.0)

  xs = {"t": jnp.arange(steps), "dout": dout, "out": out, "saved": saved, "h_prev": h_prev}
  if lstm:
    xs["c"], xs["c_prev"] = c_seq, c_prev
  dc_init = dc_n if lstm else jnp.zeros_like(h0)
  (dh, dc), dgx = jax.lax.scan(body, (dh_n, dc_init), xs, reverse=True)
  return dgx, dh, (dc if lstm else jnp.zeros((0,), jnp.float32))


def weight_grads(mode, dgx, h0, out, saved, operand_dtype=jnp.float32, w_hh=None):
  """(dw_hh, db_hh) from the recurrence's gradients: dq_t = dgx_t (the GRU's
  candidate part times its reset gate, which multiplies h W_hn) against the
  previous states, summed over steps and batch in one GEMM (and step 0's
  small one). Time-major; the
  GEMM's operands in operand_dtype (cuDNN's: the model's dtype), float32
  accumulation. Under Explicit mesh axes dw_hh takes w_hh's type (the
  batch it contracts may be split)."""
  dq = dgx
  if mode == "gru":
    hid = h0.shape[-1]
    dq = dgx.at[..., 2 * hid :].multiply(saved[..., :hid])
  db = jnp.sum(dq, axis=(0, 1))
  exact = jnp.dtype(operand_dtype) == jnp.float32
  gemm = lambda spec, a, b: jnp.einsum(
    spec,
    a.astype(operand_dtype),
    b.astype(operand_dtype),
    preferred_element_type=jnp.float32,
    precision=jax.lax.Precision.HIGHEST if exact else None,
    out_sharding=_typed_sharding(w_hh),
  )
  # Step 0's previous state is h0, every later one the output before it (no
  # concatenated copy of the outputs).
  dw = gemm("bh,bg->hg", h0, dq[0]) + gemm("tbh,tbg->hg", out[:-1], dq[1:])
  return dw, db


def _typed_sharding(like):
  """like's sharding where its type carries one (Explicit mesh axes), else
  None."""
  sharding = None if like is None else getattr(jax.typeof(like), "sharding", None)
  if not isinstance(sharding, jax.sharding.NamedSharding) or sharding.mesh.empty:
    return None
  if not any(t == jax.sharding.AxisType.Explicit for t in sharding.mesh.axis_types):
    return None
  return sharding
