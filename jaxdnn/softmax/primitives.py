"""The softmax family's primitives on the FfiOp base, over the last axis.

Operand order matches cpp/softmax/problem.h:
  forward:  x, [where]      -> y
  backward: y, dy, [where]  -> dx
every operand of one shape; `where` is bool. Rows are independent, so every
leading dim may be sharded and vmap moves its axis to the front.
"""

from __future__ import annotations

import numpy as np

from jaxdnn._primitive import FfiOp, batch_size, shaped, to_front
from jaxdnn._sharding import ROW, STAT, LeadingDimsSharding


class _RowOp(FfiOp):
  n_data = 1  # operands before `where`

  def abstract_eval(self, *avals, log, masked, implementation):
    return [shaped(avals[0].shape, avals[0].dtype)]

  def ffi_attributes(self, *, log, masked, implementation):
    return dict(log=np.int32(log), masked=np.int32(masked))

  def sharding(self, avals_in, avals_out, **_):
    x = avals_in[0]
    if x.ndim < 2:
      return None
    return LeadingDimsSharding(x.ndim - 1, 0, (ROW,) * len(avals_in), (ROW,), reduces_params=False)

  def batch(self, args, dims, **params):
    size = batch_size(args, dims)
    outs = self.bind(*(to_front(a, d, size) for a, d in zip(args, dims)), **params)
    return outs, [0]


class SoftmaxForward(_RowOp):
  name = "jaxdnn_softmax_fwd"
  target = "jaxdnn_softmax_fwd"


class SoftmaxBackward(_RowOp):
  name = "jaxdnn_softmax_bwd"
  target = "jaxdnn_softmax_bwd"

  def abstract_eval(self, y, dy, *where, log, masked, implementation):
    return [shaped(y.shape, y.dtype)]


softmax_forward = SoftmaxForward()
softmax_backward = SoftmaxBackward()


class _CrossEntropyOp(FfiOp):
  """Cross-entropy primitives: per-row results over leading dims (rows)."""

  def ffi_attributes(self, *, smoothing, z_loss, ignore_index, implementation):
    return dict(
      label_smoothing=np.float32(smoothing),
      z_loss=np.float32(z_loss),
      has_ignore=np.int32(ignore_index is not None),
      ignore_index=np.int32(0 if ignore_index is None else ignore_index),
    )

  def batch(self, args, dims, **params):
    size = batch_size(args, dims)
    outs = self.bind(*(to_front(a, d, size) for a, d in zip(args, dims)), **params)
    return outs, [0] * len(outs)


class CrossEntropyForward(_CrossEntropyOp):
  """logits [..., V], labels [...] int32 -> loss, lse [...] float32."""

  name = "jaxdnn_cross_entropy_fwd"
  target = "jaxdnn_cross_entropy_fwd"

  def abstract_eval(self, logits, labels, **_):
    return [shaped(labels.shape, np.float32), shaped(labels.shape, np.float32)]

  def sharding(self, avals_in, avals_out, **_):
    logits = avals_in[0]
    if logits.ndim < 2:
      return None
    return LeadingDimsSharding(logits.ndim - 1, 0, (ROW, STAT), (STAT, STAT), reduces_params=False)


class CrossEntropyBackward(_CrossEntropyOp):
  """logits, labels, lse, g -> dlogits (logits' shape and dtype)."""

  name = "jaxdnn_cross_entropy_bwd"
  target = "jaxdnn_cross_entropy_bwd"

  def abstract_eval(self, logits, labels, lse, g, **_):
    return [shaped(logits.shape, logits.dtype)]

  def sharding(self, avals_in, avals_out, **_):
    logits = avals_in[0]
    if logits.ndim < 2:
      return None
    return LeadingDimsSharding(
      logits.ndim - 1, 0, (ROW, STAT, STAT, STAT), (ROW,), reduces_params=False
    )


cross_entropy_forward = CrossEntropyForward()
cross_entropy_backward = CrossEntropyBackward()


class _SoftCrossEntropyOp(FfiOp):
  """Cross-entropy against probability targets: per-row results over leading dims."""

  def batch(self, args, dims, **params):
    size = batch_size(args, dims)
    outs = self.bind(*(to_front(a, d, size) for a, d in zip(args, dims)), **params)
    return outs, [0] * len(outs)


class SoftCrossEntropyForward(_SoftCrossEntropyOp):
  """logits, targets [..., V] -> loss, lse, target_sum [...] float32."""

  name = "jaxdnn_soft_cross_entropy_fwd"
  target = "jaxdnn_soft_cross_entropy_fwd"

  def abstract_eval(self, logits, targets, *, smoothing, z_loss, implementation):
    return [shaped(logits.shape[:-1], np.float32)] * 3

  def ffi_attributes(self, *, smoothing, z_loss, implementation):
    return dict(label_smoothing=np.float32(smoothing), z_loss=np.float32(z_loss))

  def sharding(self, avals_in, avals_out, **_):
    logits = avals_in[0]
    if logits.ndim < 2:
      return None
    return LeadingDimsSharding(
      logits.ndim - 1, 0, (ROW, ROW), (STAT, STAT, STAT), reduces_params=False
    )


class SoftCrossEntropyBackward(_SoftCrossEntropyOp):
  """logits, targets, lse, a, b -> dlogits = a p - b q' (logits' shape and dtype)."""

  name = "jaxdnn_soft_cross_entropy_bwd"
  target = "jaxdnn_soft_cross_entropy_bwd"

  def abstract_eval(self, logits, targets, lse, a, b, *, smoothing, implementation):
    return [shaped(logits.shape, logits.dtype)]

  def ffi_attributes(self, *, smoothing, implementation):
    return dict(label_smoothing=np.float32(smoothing))

  def sharding(self, avals_in, avals_out, **_):
    logits = avals_in[0]
    if logits.ndim < 2:
      return None
    return LeadingDimsSharding(
      logits.ndim - 1, 0, (ROW, ROW, STAT, STAT, STAT), (ROW,), reduces_params=False
    )


soft_cross_entropy_forward = SoftCrossEntropyForward()
soft_cross_entropy_backward = SoftCrossEntropyBackward()
