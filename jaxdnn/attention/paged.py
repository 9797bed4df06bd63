"""paged_attention: the newest query tokens of each sequence over its paged
key/value cache (vLLM's and FlashInfer's layout: fixed-size blocks of a
shared pool, a block table per sequence), for decode (a few query tokens a
sequence) and chunked prefill (a chunk of queries over a paged prefix).

The forward reads the pool in place through the block tables
(paged_primitive.py): the CPU kernel at any query length, on CUDA the
split-KV decode kernels for up to 16 query tokens at head dims 64/128/256.
Elsewhere (a longer chunk on CUDA, other head dims, a value head dim of its
own, the "xla" oracle) the blocks are gathered into one contiguous
[batch, blocks * block size] key/value array first and the call runs on
dot_product_attention. The backward always differentiates the gathered form
(serving rarely needs it; its recompute costs one gather).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp

from jaxdnn import _extension, _platform
from jaxdnn.attention import validation
from jaxdnn.attention.api import _lengths_int32, _with_sinks, dot_product_attention
from jaxdnn.attention.paged_primitive import (
  DECODE_HEAD_DIMS,
  DECODE_MAX_Q_LEN,
  paged_attention_forward,
)

_OP = "paged_attention"


def _err(msg):
  return ValueError(f"{_OP}: {msg}")


def _check(query, key_cache, value_cache, block_tables, context_lengths):
  if query.ndim != 4:
    raise _err(f"query must be [batch, q_len, heads, head_dim], got shape {query.shape}")
  for name, c in (("key_cache", key_cache), ("value_cache", value_cache)):
    if c.ndim != 4:
      raise _err(
        f"{name} must be [num_blocks, block_size, kv_heads, head_dim], got shape {c.shape}"
      )
    # Checked here so the error names the cache, not the gathered keys.
    if c.dtype not in (jnp.float32, jnp.bfloat16, jnp.float16):
      raise _err(f"{name} must be float32, bfloat16 or float16, got {c.dtype}")
  if key_cache.shape[:3] != value_cache.shape[:3]:
    raise _err(
      "key_cache and value_cache must share [num_blocks, block_size, kv_heads], got "
      f"{key_cache.shape} and {value_cache.shape}"
    )
  if key_cache.shape[2] < 1 or query.shape[2] % key_cache.shape[2]:
    raise _err(
      f"the caches' kv_heads ({key_cache.shape[2]}) must divide query's heads ({query.shape[2]})"
    )
  batch, q_len = query.shape[:2]
  for name, x, rank in (("block_tables", block_tables, 2), ("context_lengths", context_lengths, 1)):
    if not jnp.issubdtype(x.dtype, jnp.integer):
      raise TypeError(f"{_OP}: {name} must be integers, got dtype {x.dtype}")
    if x.ndim != rank or x.shape[0] != batch:
      want = "[batch, max_blocks]" if rank == 2 else "[batch]"
      raise _err(f"{name} must be {want} with batch {batch}, got shape {x.shape}")
  span = block_tables.shape[1] * key_cache.shape[1]
  if q_len > span:
    raise _err(
      f"q_len {q_len} exceeds the tokens the block tables can hold "
      f"({block_tables.shape[1]} blocks x {key_cache.shape[1]})"
    )


@dataclasses.dataclass(frozen=True)
class _Config:
  scale: float | None
  softcap: float | None
  local_window_size: object
  implementation: str | None


def _gathered(cfg, query, key_cache, value_cache, blocks, lengths, sinks):
  """The blocks gathered into contiguous keys/values, then
  dot_product_attention with each context's length, causal bottom-right."""
  batch = query.shape[0]
  span = blocks.shape[1] * key_cache.shape[1]
  lengths = jnp.clip(lengths, 0, span).astype(jnp.int32)
  # Positions past a sequence's context read stale or foreign blocks: zero
  # them, so nothing but the mask decides (a stale NaN stays out of P.V).
  live = (jnp.arange(span)[None, :] < lengths[:, None])[..., None, None]

  def gather(cache):
    rows = jnp.take(cache, blocks, axis=0, mode="clip")  # [batch, max_blocks, block, kv_heads, d]
    rows = rows.reshape(batch, span, *cache.shape[2:])
    return jnp.where(live, rows, jnp.zeros((), cache.dtype))

  return dot_product_attention(
    query,
    gather(key_cache),
    gather(value_cache),
    is_causal=True,
    key_value_seq_lengths=lengths,
    scale=cfg.scale,
    softcap=cfg.softcap,
    local_window_size=cfg.local_window_size,
    sinks=sinks,
    implementation=cfg.implementation,
  )


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _in_place(cfg, query, key_cache, value_cache, blocks, lengths, sinks):
  return _in_place_fwd(cfg, query, key_cache, value_cache, blocks, lengths, sinks)[0]


def _in_place_fwd(cfg, query, key_cache, value_cache, blocks, lengths, sinks):
  scale = 1.0 / math.sqrt(query.shape[-1]) if cfg.scale is None else float(cfg.scale)
  left, right = validation.window_sides(cfg.local_window_size)
  out, lse = paged_attention_forward.bind(
    query,
    key_cache,
    value_cache,
    blocks,
    lengths,
    scale=scale,
    softcap=float(cfg.softcap or 0.0),
    window_left=left,
    window_right=right,
    implementation=cfg.implementation,
  )
  if sinks is not None:
    out, _ = _with_sinks(out, lse, sinks)
  return out, (query, key_cache, value_cache, blocks, lengths, sinks)


def _in_place_bwd(cfg, saved, dout):
  query, key_cache, value_cache, blocks, lengths, sinks = saved
  _, vjp = jax.vjp(
    lambda q, k, v, s: _gathered(cfg, q, k, v, blocks, lengths, s),
    query,
    key_cache,
    value_cache,
    sinks,
  )
  dq, dk, dv, dsinks = vjp(dout)
  return dq, dk, dv, None, None, dsinks


_in_place.defvjp(_in_place_fwd, _in_place_bwd)


def _in_place_serves(query, key_cache, value_cache, implementation) -> bool:
  """Whether a kernel reads this call's pool in place (else it is gathered)."""
  if implementation == "xla" or query.dtype == jnp.float64:
    return False
  if not (query.shape[-1] == key_cache.shape[-1] == value_cache.shape[-1]):
    return False
  if query.shape[-1] > validation.MAX_HEAD_DIM:
    return False
  backend = jax.default_backend()
  if implementation == "cuda" or (implementation is None and backend == "gpu"):
    return (
      _extension.has_cuda_target(paged_attention_forward.target)
      and query.dtype in (jnp.bfloat16, jnp.float16)
      and query.shape[1] <= DECODE_MAX_Q_LEN
      and query.shape[-1] in DECODE_HEAD_DIMS
    )
  return implementation == "cpu" or (implementation is None and backend == "cpu")


def paged_attention(
  query,
  key_cache,
  value_cache,
  block_tables,
  context_lengths,
  *,
  scale=None,
  softcap=None,
  local_window_size=None,
  sinks=None,
  implementation=None,
):
  """Attention of each sequence's last q_len tokens over its paged cache.

  Args:
    query: [batch, q_len, heads, head_dim]: each sequence's newest q_len
      tokens (decode: 1-16; chunked prefill: the chunk), at positions
      context_lengths - q_len ... context_lengths - 1 of their sequence.
    key_cache, value_cache: [num_blocks, block_size, kv_heads, head_dim]
      (value may have its own head dim); kv_heads divides heads (GQA).
    block_tables: int [batch, max_blocks]: each sequence's cache blocks in
      order; entries past its context are not read (any index in range).
    context_lengths: int [batch]: tokens in each sequence's cache, its own
      query tokens included (their keys and values already written); values
      past what the table holds count as that much, negative ones as 0, and
      one shorter than q_len aligns the queries top-left
      (dot_product_attention's causal rule).
    scale, softcap, local_window_size, sinks, implementation: as
      dot_product_attention's; the mask is causal, aligned at the end of
      each sequence's context.

  Returns:
    [batch, q_len, heads, value head_dim] in query's dtype.
  """
  query, key_cache, value_cache = (
    validation.as_array(n, x)
    for n, x in (("query", query), ("key_cache", key_cache), ("value_cache", value_cache))
  )
  block_tables = validation.as_array("block_tables", block_tables)
  context_lengths = validation.as_array("context_lengths", context_lengths)
  _check(query, key_cache, value_cache, block_tables, context_lengths)
  if implementation == "cudnn":
    implementation = "cuda"
  _platform.check_implementation(implementation, _OP)
  validation.check_scalars(scale, softcap, 0.0, None)
  blocks = block_tables.astype(jnp.int32)
  span = blocks.shape[1] * key_cache.shape[1]
  cfg = _Config(scale, softcap, local_window_size, implementation)
  if not _in_place_serves(query, key_cache, value_cache, implementation):
    return _gathered(cfg, query, key_cache, value_cache, blocks, context_lengths, sinks)
  # The kernels clamp the lengths themselves (no launch for a clip).
  lengths = _lengths_int32(context_lengths, span)
  sinks = validation.check_sinks(validation.as_array("sinks", sinks, optional=True), query.shape[2])
  if sinks is not None:
    sinks = sinks.astype(jnp.float32)
  validation.window_sides(local_window_size)  # its errors at trace time, as dot_product_attention's
  return _in_place(cfg, query, key_cache, value_cache, blocks, lengths, sinks)
