"""Fused attention: api (public function), reference (plain JAX, the oracle),
primitives (forward and backward FFI primitives), sharding (batch/head rule),
dropout (the shared dropout bits), validation (argument checks),
context_parallel (a sequence sharded across devices, inside shard_map),
paged (attention over a paged key/value cache)."""

from jaxdnn.attention.api import dot_product_attention
from jaxdnn.attention.context_parallel import dot_product_attention_context_parallel
from jaxdnn.attention.paged import paged_attention

__all__ = ["dot_product_attention", "dot_product_attention_context_parallel", "paged_attention"]
