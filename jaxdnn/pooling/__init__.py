"""Pooling, channels-last, 1D-3D: max_pool (dilation, return_indices),
avg_pool (count_include_pad), global_avg_pool with Flax's arguments, and
PyTorch's adaptive pools.
api (the public functions), geometry (windows, strides and padding to
output sizes), reference (plain JAX, the oracle), primitives."""

from jaxdnn.pooling.api import (
  adaptive_avg_pool,
  adaptive_max_pool,
  avg_pool,
  global_avg_pool,
  max_pool,
)

__all__ = ["max_pool", "avg_pool", "global_avg_pool", "adaptive_avg_pool", "adaptive_max_pool"]
