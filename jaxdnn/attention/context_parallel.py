"""Context parallelism: attention over a sequence split across devices.

Called inside `jax.shard_map`, where query, key and value hold one contiguous
chunk of the sequence (axis 1) per device along `axis_name`. Keys and values
are all-gathered (their gradients come back reduce-scattered: the transpose
of the all-gather), and each device attends its own queries to the whole
sequence with the same kernels as the unsharded call. Causality needs no
extra masking: the key/value length of device i is (i + 1) * chunk, and
since a query chunk is shorter than the gathered keys, the causal diagonal is
aligned bottom-right at exactly the queries' global positions, so key tiles
past it are skipped as in the unsharded kernel.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdnn.attention import validation
from jaxdnn.attention.api import dot_product_attention


def _err(msg):
  return ValueError(f"dot_product_attention_context_parallel: {msg}")


def dot_product_attention_context_parallel(
  query,
  key,
  value,
  *,
  axis_name,
  scale=None,
  is_causal=False,
  local_window_size=None,
  query_segment_ids=None,
  key_value_segment_ids=None,
  softcap=None,
  return_logsumexp=False,
  implementation=None,
):
  """`dot_product_attention` for a sequence sharded over `axis_name` (inside shard_map).

  query, key, value: [batch, chunk, heads, head_dim], this device's chunk of
  the sequence (self attention: the same chunking for queries and keys).
  local_window_size: only a left window (an int means (left, 0)) together
  with is_causal. Segment ids are this device's chunk, like the inputs.
  """
  query, key, value = (
    validation.as_array(n, x) for n, x in (("query", query), ("key", key), ("value", value))
  )
  if query.ndim != 4 or key.ndim != 4:
    raise _err("query, key and value must be [batch, chunk, heads, head_dim]")
  is_causal = validation.check_flag("is_causal", is_causal)
  if query.shape[1] != key.shape[1]:
    raise _err(
      f"query and key chunks must have the same length, got {query.shape[1]} and {key.shape[1]}"
    )
  if local_window_size is not None:
    window = local_window_size
    if validation.is_int(window):  # an int is the left side here
      window = (window, 0)
    left, right = validation.window_sides(window)
    if not is_causal or right != 0:
      raise _err("only a causal left window (left, 0) is supported across devices")
    local_window_size = (left, 0)
  chunk = query.shape[1]
  key = jax.lax.all_gather(key, axis_name, axis=1, tiled=True)
  value = jax.lax.all_gather(value, axis_name, axis=1, tiled=True)
  if key_value_segment_ids is not None:
    key_value_segment_ids = jax.lax.all_gather(key_value_segment_ids, axis_name, axis=1, tiled=True)
  kv_lengths = None
  if is_causal:
    visible = (jax.lax.axis_index(axis_name) + 1) * chunk
    kv_lengths = jnp.full((query.shape[0],), visible, jnp.int32)
  return dot_product_attention(
    query,
    key,
    value,
    scale=scale,
    is_causal=is_causal,
    key_value_seq_lengths=kv_lengths,
    local_window_size=local_window_size,
    query_segment_ids=query_segment_ids,
    key_value_segment_ids=key_value_segment_ids,
    softcap=softcap,
    return_logsumexp=return_logsumexp,
    implementation=implementation,
  )
