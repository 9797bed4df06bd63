"""Public linear_cross_entropy: the vocabulary projection and the softmax
cross-entropy chunk by chunk over the tokens, so the [tokens, vocab] logits
never exist whole, forward or backward.

Each chunk's logits (hidden_c @ weight, on tensor cores through XLA's dot)
go through the cross-entropy kernels (loss and float32 log-sum-exp forward,
dlogits backward). For a reduced loss ("mean", "sum") the forward of the
gradient computes the gradients as it goes, as Liger-Kernel's fused linear
cross-entropy does: per chunk dhidden_c = dlogits_c @ weight.T and
dweight += hidden_c.T @ dlogits_c, the cotangent (a scalar) scaling them
afterwards, so training runs the three matmuls of the unfused composition
and holds one chunk of logits and dlogits at a time. With reduction="none"
the per-row cotangents are only known in the backward, which recomputes the
chunks' logits (a fourth matmul). A plain forward (no gradient) runs the
projection and the loss only.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension, _platform
from jaxdnn._primitive import match_vma, vary_like, vma_token
from jaxdnn.softmax import reference
from jaxdnn.softmax.cross_entropy import (
  check_labels,
  check_options,
  count_rows,
  labels_int32,
  reduce_rows,
)
from jaxdnn.softmax.primitives import cross_entropy_backward, cross_entropy_forward

_OP = "linear_cross_entropy"
_FLOATS = tuple(np.dtype(d) for d in (jnp.float32, jnp.bfloat16, jnp.float16, np.float64))
# Default chunk: about this many bytes of logits (and as many of dlogits).
CHUNK_BYTES = 1 << 28


def default_chunk(tokens, vocab, itemsize):
  """Tokens per chunk: ~CHUNK_BYTES of logits, a multiple of 128 when more
  than 128 tokens fit, never more than the tokens."""
  chunk = max(1, CHUNK_BYTES // max(1, vocab * itemsize))
  if chunk > 128:
    chunk -= chunk % 128
  return max(1, min(tokens, chunk))


def _chunked(x, chunk, fill):
  """[T, ...] -> [T / chunk, chunk, ...], the tail padded with `fill`."""
  pad = -x.shape[0] % chunk
  if pad:
    x = jnp.concatenate([x, jnp.full((pad,) + x.shape[1:], fill, x.dtype)])
  return x.reshape((-1, chunk) + x.shape[1:])


def _logits(h, w, b):
  out = h @ w
  return out if b is None else (out.astype(jnp.float32) + b).astype(out.dtype)


def _ce_params(static):
  smoothing, z_loss, ignore_index, impl, _ = static
  return dict(smoothing=smoothing, z_loss=z_loss, ignore_index=ignore_index, implementation=impl)


def _forward_scan(static, h, w, b, labels):
  """Per-row losses [T] (float32), chunk by chunk."""
  chunk = static[4]
  tokens = h.shape[0]

  def body(_, xs):
    h_c, y_c = xs
    loss, _lse = cross_entropy_forward.bind(_logits(h_c, w, b), y_c, **_ce_params(static))
    return None, loss

  _, losses = jax.lax.scan(body, None, (_chunked(h, chunk, 0), _chunked(labels, chunk, 0)))
  return losses.reshape(-1)[:tokens]


def _grad_scan(static, h, w, b, labels, row_g):
  """Per-row losses and the gradients of sum(loss * row_g): dhidden [T, H]
  (hidden's dtype), dweight (weight's dtype, accumulated chunk by chunk),
  dbias (float32). Padded rows have row_g 0, so they add nothing."""
  chunk = static[4]
  tokens = h.shape[0]
  params = _ce_params(static)

  def body(carry, xs):
    dw, db = carry
    h_c, y_c, g_c = xs
    logits = _logits(h_c, w, b)
    loss, lse = cross_entropy_forward.bind(logits, y_c, **params)
    (dlogits,) = cross_entropy_backward.bind(logits, y_c, lse, g_c, **params)
    dh_c = dlogits @ w.T
    dw = dw + jnp.dot(h_c.T, dlogits, preferred_element_type=jnp.float32).astype(dw.dtype)
    if db is not None:
      db = db + jnp.sum(dlogits, axis=0, dtype=jnp.float32)
    return (dw, db), (loss, dh_c)

  # Inside shard_map the sums vary as h and w do: so must their initial carry.
  vary = lambda z: vary_like(vary_like(z, h), w)
  init = (
    vary(jnp.zeros(w.shape, w.dtype)),
    None if b is None else vary(jnp.zeros(b.shape, jnp.float32)),
  )
  xs = (_chunked(h, chunk, 0), _chunked(labels, chunk, 0), _chunked(row_g, chunk, 0.0))
  (dw, db), (losses, dh) = jax.lax.scan(body, init, xs)
  return losses.reshape(-1)[:tokens], dh.reshape(-1, h.shape[1])[:tokens], dw, db


# A reduced loss: sum(loss * row_g), row_g = 1 / count ("mean") or 1 ("sum").
@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _reduced(static, h, w, b, labels, row_g):
  return jnp.sum(_forward_scan(static, h, w, b, labels) * row_g)


def _reduced_fwd(static, h, w, b, labels, row_g):
  losses, dh, dw, db = _grad_scan(static, h, w, b, labels, row_g)
  return jnp.sum(losses * row_g), (dh, dw, db, b, vma_token(w))


# The weight's and bias's gradients are returned in their primals' types:
# summed over the mesh axes the tokens vary on and they do not (shard_map).
def _reduced_bwd(static, res, g):
  dh, dw, db, b, w_token = res
  dbias = None if b is None else match_vma((db * g).astype(b.dtype), b)
  return (dh * g).astype(dh.dtype), match_vma((dw * g).astype(dw.dtype), w_token), dbias, None, None


_reduced.defvjp(_reduced_fwd, _reduced_bwd)


# Per-row losses: the backward recomputes the chunks with the rows' cotangents.
@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _per_row(static, h, w, b, labels):
  return _forward_scan(static, h, w, b, labels)


def _per_row_fwd(static, h, w, b, labels):
  return _forward_scan(static, h, w, b, labels), (h, w, b, labels)


def _per_row_bwd(static, res, g):
  h, w, b, labels = res
  _, dh, dw, db = _grad_scan(static, h, w, b, labels, g.astype(jnp.float32))
  return dh, match_vma(dw, w), None if b is None else match_vma(db.astype(b.dtype), b), None


_per_row.defvjp(_per_row_fwd, _per_row_bwd)


def _check_array(name, x):
  if not hasattr(x, "shape") or not hasattr(x, "dtype"):
    raise TypeError(f"{_OP}: {name} must be an array, got {type(x).__name__}")
  if np.dtype(x.dtype) not in _FLOATS:
    raise TypeError(
      f"{_OP}: {name} must be float32, bfloat16, float16 or float64, got dtype {x.dtype}"
    )


def linear_cross_entropy(
  hidden,
  weight,
  labels,
  *,
  bias=None,
  label_smoothing=0.0,
  ignore_index=None,
  z_loss=0.0,
  reduction="mean",
  chunk_size=None,
  implementation=None,
):
  """softmax_cross_entropy(hidden @ weight + bias, labels) without the logits.

  Args:
    hidden: [..., features], float32, bfloat16 or float16 (float64 runs on
      the XLA composition with one warning).
    weight: [features, vocab] (a Flax Dense kernel's layout), hidden's dtype.
    labels: integer array of hidden's shape without the last axis.
    bias: None or [vocab].
    label_smoothing, ignore_index, z_loss, reduction: as
      `softmax_cross_entropy`.
    chunk_size: tokens per chunk (default: about 256 MiB of logits); the
      memory the loss holds is about two chunks of logits, not all of them.
    implementation: None, "cuda" or "cpu" (the cross-entropy kernels inside
      the chunks), or "xla": the unfused composition (all logits at once),
      the oracle.

  Returns:
    float32 (float64 for float64): a scalar, or the per-row losses. The
    logits are hidden @ weight in hidden's dtype (f32 accumulation), as the
    unfused composition computes them. The gradient of weight is
    accumulated over the chunks in weight's dtype.
  """
  _check_array("hidden", hidden)
  _check_array("weight", weight)
  hidden, weight = jnp.asarray(hidden), jnp.asarray(weight)
  if hidden.ndim < 1:
    raise ValueError(f"{_OP}: hidden must have a features axis, got a scalar")
  if weight.ndim != 2 or weight.shape[0] != hidden.shape[-1] or weight.shape[1] < 1:
    raise ValueError(
      f"{_OP}: weight must be [features, vocab] with features = hidden's last axis "
      f"({hidden.shape[-1]}) and vocab >= 1, got {weight.shape}"
    )
  if weight.dtype != hidden.dtype:
    raise TypeError(f"{_OP}: weight must have hidden's dtype {hidden.dtype}, got {weight.dtype}")
  vocab = weight.shape[1]
  if bias is not None:
    _check_array("bias", bias)
    bias = jnp.asarray(bias)
    if bias.shape != (vocab,):
      raise ValueError(f"{_OP}: bias must have shape (vocab,) = ({vocab},), got {bias.shape}")
  check_labels(_OP, labels, hidden.shape[:-1])
  labels = jnp.asarray(labels)
  smoothing, z, ignore_index = check_options(_OP, label_smoothing, z_loss, ignore_index, reduction)
  tokens = int(np.prod(hidden.shape[:-1], dtype=np.int64))
  if chunk_size is not None and (
    isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
  ):
    raise ValueError(f"{_OP}: chunk_size must be a positive int or None, got {chunk_size!r}")
  impl = _platform.resolve(
    implementation,
    _OP,
    lambda: (
      None
      if _extension.has_cuda_target("jaxdnn_cross_entropy_fwd")
      else "this build has no CUDA cross-entropy kernel"
    ),
    no_kernel="a float64 hidden" if hidden.dtype == jnp.float64 else None,
  )
  if impl == "xla":
    logits = _logits(hidden, weight, bias)
    loss, _ = reference.cross_entropy(
      logits, labels, smoothing=smoothing, z_loss=z, ignore_index=ignore_index
    )
    return reduce_rows(loss, labels, ignore_index, reduction)
  chunk = chunk_size or default_chunk(tokens, vocab, np.dtype(hidden.dtype).itemsize)
  static = (smoothing, z, ignore_index, impl, min(chunk, max(tokens, 1)))
  h = hidden.reshape(tokens, hidden.shape[-1])
  y = labels_int32(labels.reshape(tokens), vocab, ignore_index)
  if reduction == "none":
    return _per_row(static, h, weight, bias, y).reshape(labels.shape)
  if reduction == "sum":
    scale = jnp.float32(1.0)
  else:
    scale = 1.0 / count_rows(labels, ignore_index).astype(jnp.float32)
  row_g = jnp.broadcast_to(scale, (tokens,)).astype(jnp.float32)
  return _reduced(static, h, weight, bias, y, row_g)
