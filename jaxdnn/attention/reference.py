"""The plain-JAX attention: implementation="xla" and the kernels' test oracle.

It follows the rules of cpp/attention/mask.h exactly:
  logits = scale * q.k, soft-capped (softcap * tanh(logits / softcap)), plus bias;
  a (query i, key j) pair takes part when i < q_len, j < kv_len, j lies in the
  causal / window band around the row's diagonal: i when the query array is at
  least as long as the key/value array (top-left, as jax.nn), else
  i + max(kv_len - q_len, 0) with the valid lengths (bottom-right: decode,
  chunked prefill),
  the segment ids match and `mask` is True;
  a query row with no key gives zeros and a log-sum-exp of -inf;
  dropout drops probabilities (after normalisation) by the bits of dropout.py.
All arrays are 4-D [batch, seq, heads, head_dim]; softmax runs in float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdnn.attention import dropout as dropout_bits


def allowed_pairs(
  batch,
  q_len,
  kv_len,
  *,
  is_causal,
  window,
  q_lengths,
  kv_lengths,
  q_segment_ids,
  kv_segment_ids,
  mask,
):
  """[batch or 1, heads or 1, q_len, kv_len] bool: which logits take part."""
  i = jnp.arange(q_len)[None, :, None]
  j = jnp.arange(kv_len)[None, None, :]
  ql = jnp.full((batch,), q_len, jnp.int32) if q_lengths is None else jnp.clip(q_lengths, 0, q_len)
  kl = (
    jnp.full((batch,), kv_len, jnp.int32) if kv_lengths is None else jnp.clip(kv_lengths, 0, kv_len)
  )
  ql, kl = ql[:, None, None], kl[:, None, None]
  diag = i + jnp.maximum(kl - ql, 0) if q_len < kv_len else i
  ok = (i < ql) & (j < kl)
  if is_causal:
    ok &= j <= diag
  if window is not None:
    left, right = window
    if left >= 0:
      ok &= j >= diag - left
    if right >= 0:
      ok &= j <= diag + right
  if q_segment_ids is not None:
    ok &= q_segment_ids[:, :, None] == kv_segment_ids[:, None, :]
  ok = ok[:, None]
  if mask is not None:
    ok &= mask
  return ok


def attention(
  query,
  key,
  value,
  bias=None,
  mask=None,
  *,
  scale,
  is_causal=False,
  window=None,
  q_lengths=None,
  kv_lengths=None,
  q_segment_ids=None,
  kv_segment_ids=None,
  softcap=None,
  dropout_rate=0.0,
  seeds=None,
  sinks=None,
):
  """Returns (out [B, T, N, H] in query's dtype, lse [B, N, T] float32).

  sinks: None or [N] logits, one per query head, added to every row's
  softmax denominator (as is: not scaled, capped or masked); the lse
  includes them."""
  batch, q_len, heads, dim = query.shape
  kv_len, kv_heads = key.shape[1], key.shape[2]
  group = heads // kv_heads
  q = query.reshape(batch, q_len, kv_heads, group, dim)
  # float32 means float32 products (on a GPU XLA's default would be TF32,
  # ~1e-3 off): the same numbers as the CPU kernel and a true oracle.
  precision = jax.lax.Precision.HIGHEST if query.dtype == jnp.float32 else None
  # float64 accumulates in float64: cuBLAS has no float64 x float64 -> float32 GEMM.
  acc = jnp.float64 if query.dtype == jnp.float64 else jnp.float32
  logits = jnp.einsum("btkgd,bskd->bkgts", q, key, preferred_element_type=acc, precision=precision)
  logits = logits.reshape(batch, heads, q_len, kv_len) * jnp.float32(scale)
  if softcap:
    logits = softcap * jnp.tanh(logits / softcap)
  if bias is not None:
    logits = logits + bias.astype(jnp.float32)
  ok = allowed_pairs(
    batch,
    q_len,
    kv_len,
    is_causal=is_causal,
    window=window,
    q_lengths=q_lengths,
    kv_lengths=kv_lengths,
    q_segment_ids=q_segment_ids,
    kv_segment_ids=kv_segment_ids,
    mask=mask,
  )
  logits = jnp.where(ok, logits, -jnp.inf)
  row_max = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
  sink = None if sinks is None else sinks.astype(acc).reshape(1, heads, 1, 1)
  if sink is not None:
    row_max = jnp.maximum(row_max, jax.lax.stop_gradient(sink))
  row_max = jnp.where(jnp.isfinite(row_max), row_max, 0.0)
  e = jnp.exp(logits - row_max)
  total = jnp.sum(e, axis=-1, keepdims=True)
  if sink is not None:
    total = total + jnp.exp(sink - row_max)
  nonempty = total != 0  # NaN (a NaN logit) counts as non-empty: the lse is NaN too
  safe_total = jnp.where(nonempty, total, 1.0)
  probs = e / safe_total
  lse = jnp.where(nonempty, row_max + jnp.log(safe_total), -jnp.inf)[..., 0]
  if dropout_rate > 0.0:
    keep = dropout_bits.keep_mask(seeds, heads, q_len, kv_len, dropout_rate)
    probs = jnp.where(keep, probs / (1.0 - dropout_rate), 0.0)
  probs = probs.reshape(batch, kv_heads, group, q_len, kv_len).astype(value.dtype)
  out = jnp.einsum(
    "bkgts,bskd->btkgd", probs, value, preferred_element_type=acc, precision=precision
  )
  out = out.reshape(batch, q_len, heads, value.shape[-1])
  return out.astype(query.dtype), lse.astype(jnp.float32)
