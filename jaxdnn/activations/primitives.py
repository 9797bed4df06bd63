"""The activations family's primitives on the FfiOp base, over the last axis.

Operand order matches cpp/activations/problem.h:
  bias_act forward:  x, [bias f32]      -> y
  bias_act backward: dy, x, [bias f32]  -> dx, [dbias f32], [CUDA workspace]
  glu forward:  split x [..., 2C]       -> out [..., C]
                separate value, gate    -> out
  glu backward: split dout, x           -> dx [..., 2C]
                separate dout, value, gate -> dvalue, dgate
Rows are independent: every leading dim may be sharded (the bias gradient is
then psummed over the row shards) and vmap moves its axis to the front.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension
from jaxdnn._primitive import FfiOp, batch_size, not_mapped, shaped, to_front
from jaxdnn._sharding import PARAM, ROW, ROW_ALT, LeadingDimsSharding


def _attrs(act, param, flag_name, flag):
  return {"act": np.int32(act), "param": np.float32(param), flag_name: np.int32(flag)}


def _leading(x, ins, outs, reduces):
  if x.ndim < 2:
    return None
  return LeadingDimsSharding(x.ndim - 1, 0, ins, outs, reduces_params=reduces)


class BiasActForward(FfiOp):
  name = "jaxdnn_bias_act_fwd"
  target = "jaxdnn_bias_act_fwd"

  def abstract_eval(self, x, *bias, act, param, has_bias, implementation):
    return [shaped(x.shape, x.dtype)]

  def ffi_attributes(self, *, act, param, has_bias, implementation):
    return _attrs(act, param, "has_bias", has_bias)

  def sharding(self, avals_in, avals_out, has_bias, **_):
    return _leading(avals_in[0], (ROW, PARAM) if has_bias else (ROW,), (ROW,), False)

  def batch(self, args, dims, **params):
    size = batch_size(args, dims)
    x = to_front(args[0], dims[0], size)
    if not params["has_bias"] or dims[1] is not_mapped:
      return self.bind(x, *args[1:], **params), [0]
    # A per-example bias: add it in float32, then the bias-free kernel.
    z = x.astype(jnp.float32) + _per_example(args[1], dims[1], size, x.ndim)
    (y,) = self.bind(z, **{**params, "has_bias": False})
    return [y.astype(x.dtype)], [0]


def _per_example(bias, dim, size, ndim):
  """A batched bias [size, cols] shaped to broadcast over [size, ..., cols]."""
  b = to_front(bias, dim, size)
  return b.reshape((size,) + (1,) * (ndim - 2) + b.shape[-1:])


class BiasActBackward(FfiOp):
  name = "jaxdnn_bias_act_bwd"
  target = "jaxdnn_bias_act_bwd"

  def abstract_eval(self, dy, x, *bias, act, param, has_bias, implementation):
    outs = [shaped(x.shape, x.dtype)]
    if has_bias:
      outs.append(shaped(bias[0].shape, jnp.float32))
    return outs

  def ffi_attributes(self, *, act, param, has_bias, implementation):
    return _attrs(act, param, "has_bias", has_bias)

  def workspace(self, platform, avals_in, *, has_bias, **params):
    """CUDA with a bias: float32 [partials, cols] partial sums of the bias
    gradient; `partials` comes from the C++ plan (cpp/activations/plan.h)."""
    if platform != "cuda" or not has_bias:
      return []
    x = avals_in[1]
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    partials = _extension.plan_query(
      "bias_act_bwd_partials", rows=rows, cols=x.shape[-1], itemsize=np.dtype(x.dtype).itemsize
    )
    return [jax.ShapeDtypeStruct((partials, x.shape[-1]), jnp.float32)]

  def sharding(self, avals_in, avals_out, *, has_bias, **_):
    if has_bias:
      return _leading(avals_in[1], (ROW, ROW, PARAM), (ROW, PARAM), True)
    return _leading(avals_in[1], (ROW, ROW), (ROW,), False)

  def batch(self, args, dims, **params):
    size = batch_size(args, dims)
    dy, x = to_front(args[0], dims[0], size), to_front(args[1], dims[1], size)
    if not params["has_bias"]:
      return self.bind(dy, x, **params), [0]
    # Each example's bias gradient is the sum of its own rows (JAX sums them
    # again where the bias was shared): the bias-free kernel on x + bias in
    # float32, then a per-example sum.
    b = args[2] if dims[2] is not_mapped else to_front(args[2], dims[2], size)
    b = b.reshape((1 if dims[2] is not_mapped else size,) + (1,) * (x.ndim - 2) + b.shape[-1:])
    (dx,) = self.bind(
      dy.astype(jnp.float32), x.astype(jnp.float32) + b, **{**params, "has_bias": False}
    )
    dbias = jnp.sum(dx, axis=tuple(range(1, x.ndim - 1)))
    return [dx.astype(x.dtype), dbias], [0, 0]


class GluForward(FfiOp):
  name = "jaxdnn_glu_fwd"
  target = "jaxdnn_glu_fwd"

  def abstract_eval(self, x, *gate, act, param, split, implementation):
    shape = x.shape[:-1] + (x.shape[-1] // 2,) if split else x.shape
    return [shaped(shape, x.dtype)]

  def ffi_attributes(self, *, act, param, split, implementation):
    return _attrs(act, param, "split", split)

  def sharding(self, avals_in, avals_out, *, split, **_):
    if split:
      return _leading(avals_in[0], (ROW,), (ROW_ALT,), False)
    return _leading(avals_in[0], (ROW, ROW), (ROW,), False)

  def batch(self, args, dims, **params):
    size = batch_size(args, dims)
    return self.bind(*(to_front(a, d, size) for a, d in zip(args, dims)), **params), [0]


class GluBackward(FfiOp):
  name = "jaxdnn_glu_bwd"
  target = "jaxdnn_glu_bwd"

  def abstract_eval(self, dout, x, *gate, act, param, split, implementation):
    if split:
      return [shaped(x.shape, x.dtype)]
    return [shaped(x.shape, x.dtype), shaped(x.shape, x.dtype)]

  def ffi_attributes(self, *, act, param, split, implementation):
    return _attrs(act, param, "split", split)

  def sharding(self, avals_in, avals_out, *, split, **_):
    if split:
      # x (operand 1) leads the rows; dout is half as wide.
      return _leading(avals_in[1], (ROW_ALT, ROW), (ROW,), False)
    return _leading(avals_in[1], (ROW, ROW, ROW), (ROW, ROW), False)

  def batch(self, args, dims, **params):
    size = batch_size(args, dims)
    outs = self.bind(*(to_front(a, d, size) for a, d in zip(args, dims)), **params)
    return outs, [0] * len(outs)


bias_act_forward = BiasActForward()
bias_act_backward = BiasActBackward()
glu_forward = GluForward()
glu_backward = GluBackward()
