"""Plain-JAX softmax and log-softmax over the last axis: the "xla"
implementation and the test oracle. jax.nn's formulas (the maximum and the
sum over the entries `where` keeps; dropped entries give 0, or -inf for the
log), evaluated in float32 (float64 for float64) and rounded once to x's dtype, as
the kernels do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def softmax(x, where=None, *, log=False):
  xf = x.astype(jnp.float64 if x.dtype == jnp.float64 else jnp.float32)
  m = jax.lax.stop_gradient(jnp.max(xf, -1, where=where, initial=-jnp.inf, keepdims=True))
  safe = xf if where is None else jnp.where(where, xf, -jnp.inf)
  shifted = safe - m
  total = jnp.sum(jnp.exp(shifted), -1, where=where, keepdims=True)
  if log:
    out = shifted - jnp.log(total)
    out = out if where is None else jnp.where(where, out, -jnp.inf)
  else:
    out = jnp.exp(shifted) / total
    out = out if where is None else jnp.where(where, out, 0.0)
  return out.astype(x.dtype)


def cross_entropy(logits, labels, *, smoothing=0.0, z_loss=0.0, ignore_index=None):
  """Per-row loss (float32; float64 for float64 logits) and the log-sum-exp,
  by the formulas of cpp/softmax/problem.h: ignore_index rows 0, labels
  outside [0, classes) NaN."""
  acc = jnp.float64 if logits.dtype == jnp.float64 else jnp.float32
  x = logits.astype(acc)
  classes = x.shape[-1]
  m = jax.lax.stop_gradient(jnp.max(x, -1, keepdims=True))
  lse = (m + jnp.log(jnp.sum(jnp.exp(x - m), -1, keepdims=True)))[..., 0]
  valid = (labels >= 0) & (labels < classes)
  picked = jnp.take_along_axis(x, jnp.clip(labels, 0, classes - 1)[..., None], -1)[..., 0]
  loss = lse - (1.0 - smoothing) * picked + z_loss * lse * lse
  if smoothing:  # (only then: a -inf logit would make 0 * mean NaN)
    loss = loss - smoothing * jnp.mean(x, -1)
  loss = jnp.where(valid, loss, jnp.nan)
  if ignore_index is not None:
    loss = jnp.where(labels == ignore_index, 0.0, loss)
  return loss, lse


def soft_cross_entropy(logits, targets, *, smoothing=0.0, z_loss=0.0):
  """Per-row loss against probability targets (float32; float64 for float64),
  by the formula of cpp/softmax/problem.h: lse * sum(q') - sum(q' * x) +
  z_loss * lse**2 with q' = (1 - smoothing) q + smoothing / classes, the
  products taken entry by entry (a -inf logit with no target mass is NaN,
  as optax's -sum(q * log_softmax(x)) is)."""
  acc = jnp.float64 if logits.dtype == jnp.float64 else jnp.float32
  x = logits.astype(acc)
  q = targets.astype(logits.dtype).astype(acc)
  classes = x.shape[-1]
  m = jax.lax.stop_gradient(jnp.max(x, -1, keepdims=True))
  lse = (m + jnp.log(jnp.sum(jnp.exp(x - m), -1, keepdims=True)))[..., 0]
  keep = 1.0 - smoothing
  total = keep * jnp.sum(q, -1) + smoothing
  qx = keep * jnp.sum(q * x, -1)
  if smoothing:
    qx = qx + (smoothing / classes) * jnp.sum(x, -1)
  return lse * total - qx + z_loss * lse * lse
