"""jaxdnn for Flax: `attention_fn` takes exactly what Flax's multi-head
attention layers pass and runs `jaxdnn.dot_product_attention`; `RNN` stands
in for flax.nnx.RNN and runs `jaxdnn.rnn` (jaxdnn/recurrent/nnx_layer.py,
imported on first use: it is an nnx.Module, so it needs Flax).

  flax.nnx.RNN(nnx.OptimizedLSTMCell(...)) -> jaxdnn.flax.RNN(nnx.OptimizedLSTMCell(...))

  flax.linen.MultiHeadDotProductAttention(..., attention_fn=jaxdnn.flax.attention_fn)
  flax.nnx.MultiHeadAttention(..., attention_fn=jaxdnn.flax.attention_fn)

Flax's conventions are mapped: masks of any dtype (nonzero = attend, as
`flax.linen.make_attention_mask` builds them in float32), any number of
leading batch dims, `deterministic=True` meaning no dropout, `dtype` the
computation dtype, and `is_causal` (nnx) taking the causal fast path instead
of a mask. attention_fn's differences, by design: a query row with nothing to attend gives
zeros (Flax: the mean of the values), dropout draws its own bits per batch
element and head whatever `broadcast_dropout` says, and `precision` is the
kernels' own (float32 accumulation). Flax itself is not imported here.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxdnn.attention.api import dot_product_attention


def attention_fn(
  query,
  key,
  value,
  bias=None,
  mask=None,
  broadcast_dropout=True,
  dropout_rng=None,
  dropout_rate=0.0,
  deterministic=False,
  dtype=None,
  precision=None,
  module=None,
  is_causal=False,
  implementation=None,
):
  """Flax's `attention_fn` signature, computed by jaxdnn (see the module docstring)."""
  del broadcast_dropout, precision  # see the module docstring
  if module is not None:
    raise NotImplementedError(
      "jaxdnn.flax.attention_fn: sow_weights (the module argument) needs the attention "
      "weights, which a fused kernel never forms; use Flax's own attention_fn for it"
    )
  if dtype is not None:
    query, key, value = (jnp.asarray(x, dtype) for x in (query, key, value))
  query, key, value = jnp.asarray(query), jnp.asarray(key), jnp.asarray(value)
  batch_dims = query.shape[:-3]
  if len(batch_dims) > 1:  # fold Flax's leading batch dims into one
    flat = lambda x: x.reshape((-1,) + x.shape[-3:])
    query, key, value = flat(query), flat(key), flat(value)

  def logits_shaped(x):
    if x is None:
      return None
    x = jnp.asarray(x)
    if len(batch_dims) > 1:
      x = jnp.broadcast_to(x, batch_dims + x.shape[-3:]).reshape((-1,) + x.shape[-3:])
    return x

  mask = logits_shaped(mask)
  if mask is not None and mask.dtype != jnp.bool_:
    mask = mask != 0
  rate = 0.0 if deterministic else float(dropout_rate)
  out = dot_product_attention(
    query,
    key,
    value,
    logits_shaped(bias),
    mask,
    is_causal=bool(is_causal),
    dropout_rate=rate,
    dropout_rng=dropout_rng if rate > 0.0 else None,
    implementation=implementation,
  )
  return out.reshape(batch_dims + out.shape[-3:]) if len(batch_dims) > 1 else out


def __getattr__(name):
  if name == "RNN":  # an nnx.Module: Flax is imported only when it is asked for
    from jaxdnn.recurrent.nnx_layer import RNN

    return RNN
  raise AttributeError(f"module 'jaxdnn.flax' has no attribute {name!r}")
