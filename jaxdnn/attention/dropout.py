"""Attention dropout bits: the counter-based hash of cpp/attention/mask.h.

A (batch row, head, query, key) position is kept when a 32-bit hash of it and
its batch row's seed is at least `threshold(rate)`. The kernels and this
module compute the same bits, so every implementation drops the same
probabilities, in the forward and the backward, with no stored mask.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def _u32(c):
  return jnp.uint32(c)


def mix32(x):
  x = x ^ (x >> 16)
  x = x * _u32(0x7FEB352D)
  x = x ^ (x >> 15)
  x = x * _u32(0x846CA68B)
  return x ^ (x >> 16)


def threshold(rate: float) -> int:
  """Bits below this are dropped; computed from the float32 rate the kernel sees."""
  t = float(np.float32(rate)) * 4294967296.0
  return 4294967295 if t >= 4294967295.0 else int(t)


def seeds_from_rng(rng, batch: int):
  """Per-batch-row seeds [batch, 2] uint32 from a jax.random key."""
  return jax.random.bits(rng, (batch, 2), jnp.uint32)


def keep_mask(seeds, heads: int, q_len: int, kv_len: int, rate: float):
  """[batch, heads, q_len, kv_len] bool: True where the probability is kept."""
  head = jnp.arange(heads, dtype=jnp.uint32)[None, :, None, None]
  i = jnp.arange(q_len, dtype=jnp.uint32)[None, None, :, None]
  j = jnp.arange(kv_len, dtype=jnp.uint32)[None, None, None, :]
  s0 = seeds[:, 0][:, None, None, None]
  s1 = seeds[:, 1][:, None, None, None]
  h = mix32(s0 ^ mix32(head * _u32(0x9E3779B9) + s1))
  row = mix32(h ^ (i * _u32(0x85EBCA6B)))
  bits = mix32(row + j * _u32(0xC2B2AE35))
  return bits >= _u32(threshold(rate))
