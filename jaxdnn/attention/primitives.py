"""The attention family's two primitives, forward and backward, on the FfiOp base.

Operand order matches cpp/attention/call_frame.cc:
  forward:  q, k, v, [bias], [mask], [q_lengths], [kv_lengths],
            [q_segment_ids, kv_segment_ids], [seeds]          -> out, lse, [workspace]
  backward: q, k, v, out, lse, dout, [dlse], then the forward's optional
            operands                                          -> dq, dk, dv, [dbias]
`operands` (bits of OPERAND_BITS) says which optional operands are present.
Every operand's first axis is the batch, which is what the batching rule
folds vmapped axes into.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension
from jaxdnn._primitive import (
  CUDA_GRID_YZ_LIMIT,
  FfiOp,
  LaunchSplit,
  batch_size,
  not_mapped,
  shaped,
  to_front,
)
from jaxdnn.attention import reference
from jaxdnn.attention.sharding import BatchHeadsSharding

OPERAND_BITS = dict(
  bias=1, mask=2, q_lengths=4, kv_lengths=8, segments=16, dropout=32, dlse=64, dbias=128
)

FORWARD_FIXED = ("q", "k", "v")
BACKWARD_FIXED = ("q", "k", "v", "out", "lse", "dout")


def operand_kinds(fixed, operands: int) -> tuple:
  kinds = list(fixed)
  if fixed is BACKWARD_FIXED and operands & OPERAND_BITS["dlse"]:
    kinds.append("dlse")
  for name in ("bias", "mask", "q_lengths", "kv_lengths"):
    if operands & OPERAND_BITS[name]:
      kinds.append(name)
  if operands & OPERAND_BITS["segments"]:
    kinds += ["q_segment_ids", "kv_segment_ids"]
  if operands & OPERAND_BITS["dropout"]:
    kinds.append("seeds")
  return tuple(kinds)


def _attrs(operands, scale, softcap, causal, window_left, window_right, dropout_rate):
  return dict(
    operands=np.int32(operands),
    scale=np.float32(scale),
    softcap=np.float32(softcap),
    causal=np.int32(causal),
    window_left=np.int32(window_left),
    window_right=np.int32(window_right),
    dropout_rate=np.float32(dropout_rate),
  )


def _fold_batch(args, dims, kinds, expand_bias: bool):
  """Moves vmapped axes to the front and merges them into the batch axis.

  Unbatched operands are broadcast along the vmapped axis, except a bias or
  mask that broadcasts over the batch (size 1), which can stay as it is in
  the forward. Returns the new operands, the vmap size and the batch size.
  """
  size = batch_size(args, dims)
  q = to_front(args[0], dims[0], size)
  batch = q.shape[1]
  new = []
  for a, d, kind in zip(args, dims, kinds):
    keep_broadcast = kind == "mask" or (kind == "bias" and not expand_bias)
    if d is not_mapped and keep_broadcast and a.shape[0] == 1:
      new.append(a)
      continue
    x = to_front(a, d, size)
    if kind in ("bias", "mask") and x.shape[1] == 1 and batch != 1:
      x = jnp.broadcast_to(x, (size, batch) + x.shape[2:])
    new.append(x.reshape((size * x.shape[1],) + x.shape[2:]))
  return new, size, batch


def _unfold(x, size):
  return x.reshape((size, x.shape[0] // size) + x.shape[1:])


# The CUDA kernels put batch (after vmap folds into it) on a grid dimension
# that stops at 65535: larger calls run in pieces along the batch.
SPLIT_LIMITS = {"cuda": CUDA_GRID_YZ_LIMIT}


def _batch_split(platform, avals_in, kinds, out_kinds):
  """Cut along the batch (every operand's first axis) where it is past the
  platform's limit; a bias or mask broadcast over the batch goes whole to
  every piece, and its gradient (dbias) is summed over the pieces."""
  limit = SPLIT_LIMITS.get(platform)
  batch = avals_in[0].shape[0]
  if limit is None or batch <= limit:
    return None
  whole = {
    kind for kind, a in zip(kinds, avals_in) if kind in ("bias", "mask") and a.shape[0] != batch
  }
  in_axes = tuple(None if kind in whole else 0 for kind in kinds)
  out_axes = tuple("sum" if kind == "dbias" and "bias" in whole else 0 for kind in out_kinds)
  return LaunchSplit(batch, limit, in_axes, out_axes)


class AttentionForward(FfiOp):
  name = "jaxdnn_attention_fwd"
  target = "jaxdnn_attention_fwd"

  def abstract_eval(self, q, k, v, *rest, **params):
    batch, q_len, heads, _ = q.shape
    # The output takes value's head dim (MLA: its own, where the plan runs it).
    out = shaped(q.shape[:3] + v.shape[3:], q.dtype)
    return [out, shaped((batch, heads, q_len), jnp.float32)]

  def ffi_attributes(self, *, implementation, **params):
    return _attrs(**params)

  def workspace(self, platform, avals_in, **params):
    """CUDA: the float32 scratch the C++ plan asks for (cpp/attention/plan.h:
    the split-KV decode path's partials, or the sm90 forward's tile counter and
    segment ranges); none for dense non-causal prefill and training calls."""
    if platform != "cuda" or not _extension.has_cuda_target(self.target):
      return []
    elems = _extension.plan_query(
      "attention_fwd_workspace", **plan_args(avals_in, FORWARD_FIXED, **params)
    )
    return [jax.ShapeDtypeStruct((elems,), jnp.float32)] if elems > 0 else []

  def launch_split(self, platform, avals_in, *, operands, **_):
    return _batch_split(platform, avals_in, operand_kinds(FORWARD_FIXED, operands), ("out", "lse"))

  def sharding(self, avals_in, avals_out, *, operands, dropout_rate, **_):
    kinds = operand_kinds(FORWARD_FIXED, operands)
    return BatchHeadsSharding(
      kinds, ("out", "lse"), tuple(a.shape for a in avals_in), reduces_bias=False
    )

  def batch(self, args, dims, **params):
    kinds = operand_kinds(FORWARD_FIXED, params["operands"])
    new, size, _ = _fold_batch(args, dims, kinds, expand_bias=False)
    outs = self.bind(*new, **params)
    return [_unfold(o, size) for o in outs], [0, 0]


class AttentionBackward(FfiOp):
  name = "jaxdnn_attention_bwd"
  target = "jaxdnn_attention_bwd"

  def abstract_eval(self, q, k, v, *rest, operands, **params):
    outs = [shaped(q.shape, q.dtype), shaped(k.shape, k.dtype), shaped(v.shape, v.dtype)]
    if operands & OPERAND_BITS["dbias"]:
      kinds = operand_kinds(BACKWARD_FIXED, operands)
      bias = (q, k, v) + rest
      bias = bias[kinds.index("bias")]
      outs.append(shaped(bias.shape, jnp.float32))
    return outs

  def ffi_attributes(self, *, implementation, deterministic, **params):
    return dict(_attrs(**params), deterministic=np.int32(deterministic))

  def workspace(self, platform, avals_in, **params):
    """CUDA: the float32 scratch the C++ plan asks for (cpp/attention/plan.h:
    delta, dK/dV partials, a broadcast dbias's staging area, the fused
    backward's dQ accumulator)."""
    if platform != "cuda" or not _extension.has_cuda_target(self.target):
      return []
    elems = _extension.plan_query(
      "attention_bwd_workspace", **plan_args(avals_in, BACKWARD_FIXED, **params)
    )
    return [jax.ShapeDtypeStruct((elems,), jnp.float32)]

  def fallback(self, platform, **params):
    if platform == "cuda" and not _extension.has_cuda_target(self.target):
      return lambda *args: _composed_backward(*args, **params)
    return None

  def launch_split(self, platform, avals_in, *, operands, **_):
    outs = ("dq", "dk", "dv") + (("dbias",) if operands & OPERAND_BITS["dbias"] else ())
    return _batch_split(platform, avals_in, operand_kinds(BACKWARD_FIXED, operands), outs)

  def sharding(self, avals_in, avals_out, *, operands, **_):
    kinds = operand_kinds(BACKWARD_FIXED, operands)
    outs = ("dq", "dk", "dv") + (("dbias",) if operands & OPERAND_BITS["dbias"] else ())
    return BatchHeadsSharding(kinds, outs, tuple(a.shape for a in avals_in), reduces_bias=True)

  def batch(self, args, dims, **params):
    # dbias must come out per vmapped element, so the bias is expanded to the
    # full batch and its gradient summed back to the bias's batch size.
    kinds = operand_kinds(BACKWARD_FIXED, params["operands"])
    # (Without dbias, a bias broadcast over the batch stays broadcast.)
    want_dbias = bool(params["operands"] & OPERAND_BITS["dbias"])
    new, size, batch = _fold_batch(args, dims, kinds, expand_bias=want_dbias)
    outs = [_unfold(o, size) for o in self.bind(*new, **params)]
    if want_dbias:
      i = kinds.index("bias")
      bias_shape = [n for ax, n in enumerate(args[i].shape) if ax != dims[i]]
      if bias_shape[0] == 1 and batch != 1:
        outs[3] = jnp.sum(outs[3], axis=1, keepdims=True)
    return outs, [0] * len(outs)


def _composed_backward(
  *args,
  operands,
  scale,
  softcap,
  causal,
  window_left,
  window_right,
  dropout_rate,
  implementation,
  deterministic,
):
  """The backward as a plain-JAX vjp of the reference (used where no kernel exists yet)."""
  named = dict(zip(operand_kinds(BACKWARD_FIXED, operands), args))
  window = None if (window_left, window_right) == (-1, -1) else (window_left, window_right)
  has_bias = "bias" in named

  def forward(q, k, v, bias):
    return reference.attention(
      q,
      k,
      v,
      bias,
      named.get("mask"),
      scale=scale,
      is_causal=causal,
      window=window,
      q_lengths=named.get("q_lengths"),
      kv_lengths=named.get("kv_lengths"),
      q_segment_ids=named.get("q_segment_ids"),
      kv_segment_ids=named.get("kv_segment_ids"),
      softcap=softcap or None,
      dropout_rate=dropout_rate,
      seeds=named.get("seeds"),
    )

  _, vjp = jax.vjp(forward, named["q"], named["k"], named["v"], named.get("bias"))
  dlse = named.get("dlse", jnp.zeros_like(named["lse"]))
  dq, dk, dv, dbias = vjp((named["dout"], dlse))
  grads = [dq, dk, dv]
  if operands & OPERAND_BITS["dbias"] and has_bias:
    grads.append(dbias.astype(jnp.float32))
  return grads


attention_forward = AttentionForward()
attention_backward = AttentionBackward()


def plan_args(
  avals_in,
  fixed,
  *,
  operands,
  scale=1.0,
  softcap=0.0,
  causal=False,
  window_left=-1,
  window_right=-1,
  dropout_rate=0.0,
  deterministic=True,
  **_,
):
  """The problem as the C++ plan queries take it (cpp/attention/ffi_cuda.cc: QueryProblem)."""
  q, k, v = avals_in[0], avals_in[1], avals_in[2]
  batch, q_len, heads, head_dim = q.shape
  bias_dims = (1, 1, 1, 1)
  if operands & OPERAND_BITS["bias"]:
    kinds = operand_kinds(fixed, operands)
    bias_dims = tuple(avals_in[kinds.index("bias")].shape)
  return dict(
    batch=batch,
    q_len=q_len,
    kv_len=k.shape[1],
    heads=heads,
    kv_heads=k.shape[2],
    head_dim=head_dim,
    value_dim=v.shape[-1],
    dtype=_extension.dtype_code(q.dtype),
    operands=operands,
    causal=int(bool(causal)),
    window_left=window_left,
    window_right=window_right,
    softcap=int(bool(softcap)),
    dropout=int(dropout_rate != 0.0),
    deterministic=int(bool(deterministic)),
    scale_positive=int(float(np.float32(scale)) > 0),
    bias_dim0=bias_dims[0],
    bias_dim1=bias_dims[1],
    bias_dim2=bias_dims[2],
    bias_dim3=bias_dims[3],
  )
