"""paged_attention's forward primitive: the attention kernels reading the
key/value pool in place through the block tables (no gathered copy).

Operands (cpp/attention/call_frame.cc: ReadPagedFwdCall): query [batch,
q_len, heads, head_dim], key_cache and value_cache [num_blocks, block_size,
kv_heads, head_dim], block_tables int32 [batch, max_blocks], context_lengths
int32 [batch] -> out, lse [batch, heads, q_len], [workspace]. The mask is
causal at the end of each context (dot_product_attention's rule with the
context lengths as key/value lengths over the tables' span).

Kernels: the CPU attention kernel at any q_len; on CUDA the split-KV decode
kernels, so q_len <= DECODE_MAX_Q_LEN and head dims 64/128/256 (paged.py
sends anything else through the gathered path).
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
from jaxdnn.attention.sharding import BatchHeadsSharding

KINDS = ("q", "key_cache", "value_cache", "block_tables", "context_lengths")
# cpp/attention/sm80/decode_split_plan.h: kDecodeMaxQueryLen and the head dims.
DECODE_MAX_Q_LEN = 16
DECODE_HEAD_DIMS = (64, 128, 256)


class PagedAttentionForward(FfiOp):
  name = "jaxdnn_paged_attention_fwd"
  target = "jaxdnn_paged_attention_fwd"

  def abstract_eval(self, q, key_cache, value_cache, block_tables, context_lengths, **params):
    batch, q_len, heads, _ = q.shape
    return [shaped(q.shape, q.dtype), shaped((batch, heads, q_len), jnp.float32)]

  def ffi_attributes(self, *, scale, softcap, window_left, window_right, implementation):
    return dict(
      scale=np.float32(scale),
      softcap=np.float32(softcap),
      window_left=np.int32(window_left),
      window_right=np.int32(window_right),
    )

  def workspace(self, platform, avals_in, **params):
    """CUDA: the split-KV decode's float32 partials, sized by the C++ plan
    (PagedDecodeWorkspaceElems) for the tables' span."""
    if platform != "cuda" or not _extension.has_cuda_target(self.target):
      return []
    q, cache, tables = avals_in[0], avals_in[1], avals_in[3]
    batch, q_len, heads, head_dim = q.shape
    elems = _extension.plan_query(
      "paged_attention_fwd_workspace",
      batch=batch,
      q_len=q_len,
      kv_len=tables.shape[1] * cache.shape[1],
      heads=heads,
      kv_heads=cache.shape[2],
      head_dim=head_dim,
    )
    return [jax.ShapeDtypeStruct((elems,), jnp.float32)] if elems > 0 else []

  def launch_split(self, platform, avals_in, **_):
    # The decode grid's z dimension is the batch: cut past 65535, the pool whole to every piece.
    batch = avals_in[0].shape[0]
    if platform != "cuda" or batch <= CUDA_GRID_YZ_LIMIT:
      return None
    return LaunchSplit(batch, CUDA_GRID_YZ_LIMIT, (0, None, None, 0, 0), (0, 0))

  def sharding(self, avals_in, avals_out, **_):
    return BatchHeadsSharding(
      KINDS, ("out", "lse"), tuple(a.shape for a in avals_in), reduces_bias=False
    )

  def batch(self, args, dims, **params):
    """vmap: the mapped axis folds into the batch; a mapped pool folds into
    its blocks, each mapped element's tables shifted onto its own pool."""
    size = batch_size(args, dims)
    q, k, v, tables, lengths = args
    qd, kd, vd, td, ld = dims
    pool_mapped = kd is not not_mapped or vd is not not_mapped
    q, tables, lengths = (to_front(x, d, size) for x, d in zip((q, tables, lengths), (qd, td, ld)))
    if pool_mapped:
      k, v = to_front(k, kd, size), to_front(v, vd, size)
      blocks = k.shape[1]
      k = k.reshape((size * blocks,) + k.shape[2:])
      v = v.reshape((size * blocks,) + v.shape[2:])
      # Entries are clamped into the pool by the kernels: clamp first, so
      # an out-of-range entry stays inside its own element's pool.
      shift = (jnp.arange(size, dtype=jnp.int32) * blocks)[:, None, None]
      tables = jnp.clip(tables, 0, blocks - 1) + shift
    batch = q.shape[1]
    q = q.reshape((size * batch,) + q.shape[2:])
    tables = tables.reshape((size * batch,) + tables.shape[2:])
    lengths = lengths.reshape((size * batch,))
    out, lse = self.bind(q, k, v, tables, lengths, **params)
    return [
      out.reshape((size, batch) + out.shape[1:]),
      lse.reshape((size, batch) + lse.shape[1:]),
    ], [0, 0]


paged_attention_forward = PagedAttentionForward()
