"""Fused attention: api (public function), reference (plain JAX, the oracle),
primitives (forward and backward FFI primitives), sharding (batch/head rule),
dropout (the shared dropout bits), validation (argument checks)."""

from jaxdnn.attention.api import dot_product_attention

__all__ = ["dot_product_attention"]
