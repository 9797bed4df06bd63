"""Public softmax_cross_entropy: integer labels over the last axis of the
logits, with label smoothing, ignore_index and z-loss (PyTorch's and PaLM's
conventions), as a custom_vjp whose forward (loss and float32 log-sum-exp per
row) and backward (dlogits from the logits and the log-sum-exp, the
probabilities never stored) are jaxdnn primitives; the reduction is plain JAX
on the per-row losses."""

from __future__ import annotations

import functools
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension, _platform
from jaxdnn.softmax import reference
from jaxdnn.softmax.primitives import (
  cross_entropy_backward,
  cross_entropy_forward,
  soft_cross_entropy_backward,
  soft_cross_entropy_forward,
)

_OP = "softmax_cross_entropy"
REDUCTIONS = ("mean", "sum", "none")
_FLOATS = tuple(np.dtype(d) for d in (jnp.float32, jnp.bfloat16, jnp.float16, np.float64))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _rows(static, implementation, logits, labels):
  return _fwd_rows(static, implementation, logits, labels)[0]


def _fwd_rows(static, implementation, logits, labels):
  smoothing, z_loss, ignore_index = static
  return cross_entropy_forward.bind(
    logits,
    labels,
    smoothing=smoothing,
    z_loss=z_loss,
    ignore_index=ignore_index,
    implementation=implementation,
  )


def _rows_fwd(static, implementation, logits, labels):
  loss, lse = _fwd_rows(static, implementation, logits, labels)
  return loss, (logits, labels, lse)


def _rows_bwd(static, implementation, res, g):
  smoothing, z_loss, ignore_index = static
  logits, labels, lse = res
  (dlogits,) = cross_entropy_backward.bind(
    logits,
    labels,
    lse,
    g.astype(jnp.float32),
    smoothing=smoothing,
    z_loss=z_loss,
    ignore_index=ignore_index,
    implementation=implementation,
  )
  return dlogits, None


_rows.defvjp(_rows_fwd, _rows_bwd)


# Probability targets: the forward keeps the loss, the lse and sum(q) per
# row; the backward writes dlogits = a p - b q' from them, and the targets'
# own gradient, (1 - smoothing) g (lse - x), where it is asked for.
@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _soft_rows(static, implementation, logits, targets):
  return _soft_fwd(static, implementation, logits, targets)[0]


def _soft_fwd(static, implementation, logits, targets):
  smoothing, z_loss = static
  loss, lse, qsum = soft_cross_entropy_forward.bind(
    logits, targets, smoothing=smoothing, z_loss=z_loss, implementation=implementation
  )
  return loss, (logits, targets, lse, qsum)


def _soft_bwd(static, implementation, res, g):
  smoothing, z_loss = static
  logits, targets, lse, qsum = res
  g = g.astype(jnp.float32)
  a = g * ((1.0 - smoothing) * qsum + smoothing + 2.0 * z_loss * lse)
  (dlogits,) = soft_cross_entropy_backward.bind(
    logits, targets, lse, a, g, smoothing=smoothing, implementation=implementation
  )
  dq = ((1.0 - smoothing) * g)[..., None] * (lse[..., None] - logits.astype(jnp.float32))
  return dlogits, dq.astype(targets.dtype)


_soft_rows.defvjp(_soft_fwd, _soft_bwd)


def _number(op, name, value, lo, hi):
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise TypeError(f"{op}: {name} must be a Python float, got {type(value).__name__}")
  value = float(value)
  if not (lo <= value <= hi):
    raise ValueError(f"{op}: {name} must be in [{lo}, {hi}], got {value}")
  return value


def check_labels(op, labels, shape, probabilities_allowed=False):
  """Integer labels of `shape` (the logits' rows), or, where allowed, float
  probabilities of `shape` plus the classes axis (checked by the caller)."""
  if not hasattr(labels, "shape") or not hasattr(labels, "dtype"):
    raise TypeError(f"{op}: labels must be an integer array, got {type(labels).__name__}")
  if probabilities_allowed and jnp.issubdtype(labels.dtype, jnp.floating):
    return
  if not jnp.issubdtype(labels.dtype, jnp.integer):
    kinds = (
      "integer class indices or float probabilities"
      if probabilities_allowed
      else ("integer class indices")
    )
    raise TypeError(f"{op}: labels must be {kinds}, got dtype {labels.dtype}")
  if tuple(labels.shape) != tuple(shape):
    raise ValueError(
      f"{op}: labels must have logits' shape without the last axis, "
      f"{tuple(shape)}, got {tuple(labels.shape)}"
    )


def check_options(op, label_smoothing, z_loss, ignore_index, reduction):
  """(smoothing, z_loss, ignore_index) as the kernels take them."""
  smoothing = _number(op, "label_smoothing", label_smoothing, 0.0, 1.0)
  z = _number(op, "z_loss", z_loss, 0.0, float(np.finfo(np.float32).max))
  if ignore_index is not None:
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
      raise TypeError(f"{op}: ignore_index must be an int or None, got {ignore_index!r}")
    if not -(2**31) <= ignore_index < 2**31:
      raise ValueError(f"{op}: ignore_index must fit in int32, got {ignore_index}")
    ignore_index = int(ignore_index)
  if reduction not in REDUCTIONS:
    raise ValueError(f"{op}: reduction must be one of {REDUCTIONS}, got {reduction!r}")
  return smoothing, z, ignore_index


def reduce_rows(loss, labels, ignore_index, reduction):
  """The per-row losses reduced: "mean" over the rows not ignored."""
  if reduction == "none":
    return loss
  if reduction == "sum":
    return jnp.sum(loss)
  return jnp.sum(loss) / count_rows(labels, ignore_index).astype(loss.dtype)


def count_rows(labels, ignore_index):
  if ignore_index is None:
    return jnp.asarray(labels.size, jnp.int32)
  return jnp.sum(labels != ignore_index, dtype=jnp.int32)


def labels_int32(labels, classes, ignore_index):
  """int32 labels as the kernels read them: out-of-range values of wider ints
  stay out of range (classes), never wrapping onto a class or ignore_index."""
  if np.dtype(labels.dtype).itemsize <= 4 and np.dtype(labels.dtype) != np.uint32:
    return labels.astype(jnp.int32)
  keep = ((labels >= 0) & (labels < classes)) | (
    labels == ignore_index if ignore_index is not None else False
  )
  return jnp.where(keep, labels, classes).astype(jnp.int32)


def softmax_cross_entropy(
  logits,
  labels,
  *,
  label_smoothing=0.0,
  ignore_index=None,
  z_loss=0.0,
  reduction="mean",
  implementation=None,
):
  """Cross-entropy of softmax(logits) against integer labels.

  Per row: lse - (1 - label_smoothing) * logits[label]
  - label_smoothing * mean(logits) + z_loss * lse**2, with lse the row's
  log-sum-exp (PyTorch's label smoothing, PaLM's z-loss).

  Args:
    logits: [..., classes], float32, bfloat16 or float16 (float64 runs on the
      XLA composition with one warning); at least one class.
    labels: integer array of logits' shape without the last axis, or float
      probabilities of logits' shape (cast to logits' dtype; any
      non-negative weights: not renormalized; no ignore_index).
    label_smoothing: a Python float in [0, 1].
    ignore_index: None, or an int: rows with that label count for nothing
      (loss 0, no gradient, not in the mean's count).
    z_loss: a Python float >= 0.
    reduction: "mean" (over the rows not ignored; NaN when every row is),
      "sum", or "none" (the per-row losses).
    implementation: None, "cuda", "cpu" or "xla" (plain JAX, the oracle).

  Returns:
    float32 (float64 for float64 logits): a scalar, or the per-row losses.
    A label outside [0, classes) that is not ignore_index gives NaN (the
    kernels cannot raise at run time).
  """
  if not hasattr(logits, "shape") or not hasattr(logits, "dtype"):
    raise TypeError(f"{_OP}: logits must be an array, got {type(logits).__name__}")
  if np.dtype(logits.dtype) not in _FLOATS:
    raise TypeError(
      f"{_OP}: logits must be float32, bfloat16, float16 or float64, got dtype {logits.dtype}"
    )
  if logits.ndim < 1 or logits.shape[-1] < 1:
    raise ValueError(f"{_OP}: logits need a last axis of at least one class, got {logits.shape}")
  check_labels(_OP, labels, logits.shape[:-1], probabilities_allowed=True)
  smoothing, z, ignore_index = check_options(_OP, label_smoothing, z_loss, ignore_index, reduction)
  soft = jnp.issubdtype(labels.dtype, jnp.floating)
  if soft:
    if tuple(labels.shape) != tuple(logits.shape):
      raise ValueError(
        f"{_OP}: probability labels must have logits' shape {tuple(logits.shape)}, "
        f"got {tuple(labels.shape)}"
      )
    if ignore_index is not None:
      raise ValueError(f"{_OP}: ignore_index applies to integer labels, not probabilities")
  impl = _platform.resolve(
    implementation,
    _OP,
    lambda: (
      None
      if _extension.has_cuda_target("jaxdnn_soft_cross_entropy_fwd")
      else "this build has no CUDA cross-entropy kernel"
    ),
    no_kernel="float64 logits" if logits.dtype == jnp.float64 else None,
  )
  logits = jnp.asarray(logits)
  labels = jnp.asarray(labels)
  if soft:
    targets = labels.astype(logits.dtype)
    if impl == "xla":
      loss = reference.soft_cross_entropy(logits, targets, smoothing=smoothing, z_loss=z)
    else:
      loss = _soft_rows((smoothing, z), impl, logits, targets)
    return reduce_rows(loss, labels[..., 0], None, reduction)
  if impl == "xla":
    loss, _ = reference.cross_entropy(
      logits, labels, smoothing=smoothing, z_loss=z, ignore_index=ignore_index
    )
  else:
    lab = labels_int32(labels, logits.shape[-1], ignore_index)
    loss = _rows((smoothing, z, ignore_index), impl, logits, lab)
  return reduce_rows(loss, labels, ignore_index, reduction)
