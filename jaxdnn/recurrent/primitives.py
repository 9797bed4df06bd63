"""The recurrent family's primitives on the FfiOp base: one direction of one
layer over the projected inputs (operand order: cpp/recurrent/problem.h).

  forward:  gx [T, B, G*H], w_hh, b_hh, h0 [B, H], c0, lengths [B] int32
         -> out [T, B, H], h_n, c_n, saved [T, B, S], c_seq
  backward: dout, dh_n, dc_n, w_hh, h0, c0, lengths, out, saved, c_seq
         -> dgx, dh0, dc0 (the weight gradients: layer_xla.weight_grads)

c0 / c_n / c_seq / dc_n / dc0 are the LSTM's and empty ([0]) otherwise;
everything float32. A sharded batch runs per shard; under Explicit mesh
axes the results' types carry the batch's sharding (sharding.py). vmap folds
its axis into the batch (the recurrence treats examples independently);
per-example weights go through the plain-JAX recurrence (layer_xla.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension
from jaxdnn._primitive import FfiOp, batch_size, not_mapped, to_front
from jaxdnn.recurrent import layer_xla
from jaxdnn.recurrent.sharding import BATCH, backward_sharding, batch_entry, forward_sharding, typed

MODES = {"lstm": 0, "gru": 1, "rnn_tanh": 2, "rnn_relu": 3}
# The precision the CUDA kernels keep the recurrent weights in (the model's
# dtype, as cuDNN's); the CPU kernel multiplies in float32 whatever it is.
WEIGHTS = {"float32": 0, "bfloat16": 1, "float16": 2}
SAVED = {"lstm": 4, "gru": 4, "rnn_tanh": 0, "rnn_relu": 0}


def _fold(a, dim, size, batch_axis):
  """a with its vmapped axis (at `dim`) merged into its batch axis
  (`batch_axis` of the unbatched operand): [.., size * B, ..]."""
  a = to_front(a, dim, size)  # [size, ...]
  a = jnp.moveaxis(a, 0, batch_axis)  # [..., size, B, ...]
  shape = a.shape[:batch_axis] + (a.shape[batch_axis] * a.shape[batch_axis + 1],)
  return a.reshape(shape + a.shape[batch_axis + 2 :])


def _unfold(a, size, batch_axis):
  shape = a.shape[:batch_axis] + (size, a.shape[batch_axis] // size) + a.shape[batch_axis + 1 :]
  return jnp.moveaxis(a.reshape(shape), batch_axis, 0)


# The batch axis of each operand (None: not per-example) in fold order.
_FWD_BATCH_AXES = (1, None, None, 0, 0, 0)
_FWD_OUT_AXES = (1, 0, 0, 1, 1)
_BWD_BATCH_AXES = (1, 0, 0, None, 0, 0, 0, 1, 1, 1)
_BWD_OUT_AXES = (1, 0, 0)


def _fold_all(args, dims, size, axes):
  out = []
  for a, d, ax in zip(args, dims, axes):
    if ax is None or a.size == 0 and a.ndim == 1:
      out.append(a)
    elif d is not_mapped:
      out.append(_fold(jnp.broadcast_to(a, (size,) + a.shape), 0, size, ax))
    else:
      out.append(_fold(a, d, size, ax))
  return out


class RnnForward(FfiOp):
  name = "jaxdnn_rnn_fwd"
  target = "jaxdnn_rnn_fwd"

  def abstract_eval(self, gx, w_hh, b_hh, h0, c0, lengths, *, mode, weights, implementation):
    t, b, _ = gx.shape
    h = w_hh.shape[0]
    lstm = mode == "lstm"
    e = batch_entry(gx, 1)  # the results' batch is split like gx's
    seq = lambda width: typed((t, b, width), gx, ("t", BATCH, "w"), e)
    state, empty = typed((b, h), gx, (BATCH, "h"), e), typed((0,), gx)
    return [
      seq(h),
      state,
      state if lstm else empty,
      seq(SAVED[mode] * h),
      seq(h) if lstm else empty,
    ]

  def ffi_attributes(self, *, mode, weights, implementation):
    return {"mode": np.int32(MODES[mode]), "weights": np.int32(WEIGHTS[weights])}

  def workspace(self, platform, avals_in, *, mode, weights, implementation):
    return _workspace(platform, avals_in[0].shape, False, mode, weights)

  def sharding(self, avals_in, avals_out, *, mode, weights, implementation):
    return forward_sharding(mode)

  def batch(self, args, dims, **params):
    size = batch_size(args, dims)
    if dims[1] is not not_mapped or dims[2] is not not_mapped:
      return _per_example_weights(layer_xla.forward, args, dims, size, **params)
    outs = self.bind(*_fold_all(args, dims, size, _FWD_BATCH_AXES), **params)
    outs = [
      o if (o.ndim == 1 and o.size == 0) else _unfold(o, size, ax)
      for o, ax in zip(outs, _FWD_OUT_AXES)
    ]
    return outs, [not_mapped if (o.ndim == 1 and o.size == 0) else 0 for o in outs]


class RnnBackward(FfiOp):
  name = "jaxdnn_rnn_bwd"
  target = "jaxdnn_rnn_bwd"

  def abstract_eval(
    self,
    dout,
    dh_n,
    dc_n,
    w_hh,
    h0,
    c0,
    lengths,
    out,
    saved,
    c_seq,
    *,
    mode,
    weights,
    implementation,
  ):
    t, b, h = dout.shape
    g = w_hh.shape[1]
    # Each gradient typed as its operand (custom_vjp checks they match): dgx
    # like dout (so like gx), dh0 and dc0 like h0 and c0.
    like = lambda a: a.update(dtype=jnp.dtype(jnp.float32), weak_type=False)
    return [
      typed((t, b, g), dout, ("t", BATCH, "g"), batch_entry(dout, 1)),
      like(h0),
      like(c0),
    ]

  def ffi_attributes(self, *, mode, weights, implementation):
    return {"mode": np.int32(MODES[mode]), "weights": np.int32(WEIGHTS[weights])}

  def workspace(self, platform, avals_in, *, mode, weights, implementation):
    t, b, h = avals_in[0].shape
    gates = avals_in[3].shape[1] // max(h, 1)
    return _workspace(platform, (t, b, gates * h), True, mode, weights)

  def sharding(self, avals_in, avals_out, *, mode, weights, implementation):
    return backward_sharding(mode)

  def batch(self, args, dims, **params):
    size = batch_size(args, dims)
    if dims[3] is not not_mapped:
      return _per_example_weights(layer_xla.backward, args, dims, size, **params)
    outs = self.bind(*_fold_all(args, dims, size, _BWD_BATCH_AXES), **params)
    outs = [
      o if (o.ndim == 1 and o.size == 0) else _unfold(o, size, ax)
      for o, ax in zip(outs, _BWD_OUT_AXES)
    ]
    return outs, [not_mapped if (o.ndim == 1 and o.size == 0) else 0 for o in outs]


def cuda_plan_bytes(steps, batch, hidden, backward, mode, weights):
  """The CUDA recurrence's workspace in bytes on the current device
  (cpp/recurrent/sm80/rnn_plan.h), or -1 where it has no plan."""
  return _extension.plan_query(
    "rnn_workspace",
    backward=int(backward),
    mode=MODES[mode],
    weights=WEIGHTS[weights],
    steps=steps,
    batch=batch,
    hidden=hidden,
  )


def _workspace(platform, gx_shape, backward, mode, weights):
  if platform != "cuda":
    return []
  t, b, gh = gx_shape
  hidden = gh // {"lstm": 4, "gru": 3}.get(mode, 1)
  size = cuda_plan_bytes(t, b, hidden, backward, mode, weights)
  if size < 0:
    raise ValueError(f"rnn: the CUDA recurrence has no plan for hidden={hidden}, batch={b}")
  return [jax.ShapeDtypeStruct((max(size, 1),), jnp.uint8)]


def _per_example_weights(fn, args, dims, size, *, mode, weights, implementation):
  """Per-example weights: the recurrence in plain JAX (layer_xla), vmapped."""
  in_axes = [None if d is not_mapped else d for d in dims]
  outs = jax.vmap(lambda *a: fn(mode, *a), in_axes=in_axes, axis_size=size)(*args)
  return list(outs), [0] * len(outs)


rnn_forward = RnnForward()
rnn_backward = RnnBackward()
