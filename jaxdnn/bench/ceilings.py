"""The memory ceiling measured in the same run.

Two measurements, bytes read + bytes written over time: an XLA elementwise
pass over 512 MiB of bfloat16 (y = x + 1), and, when PyTorch with CUDA is
there, a device-to-device copy (`dst.copy_(src)`, a cudaMemcpy) of 1 GiB.
The ceiling is the faster of the two, so fractions of it are conservative.
With timing.MODE["gpu_busy"], both are also measured as GPU-busy time (CUPTI
records: see timing.py), the ceiling for the GPU-busy figures.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdnn.bench import timing
from jaxdnn.bench.timing import time_jax_chained, time_torch


def xla_elementwise_bandwidth(nbytes=512 * 2**20, busy=False) -> float | None:
  n = nbytes // 2
  x = jax.random.normal(jax.random.key(0), (n // 4096, 4096), jnp.bfloat16)
  t = time_jax_chained(lambda x: x * jnp.bfloat16(-1), x)
  if busy:
    t = timing.busy_jax(jax.jit(lambda x: x * jnp.bfloat16(-1)), x)
  return 2 * n * 2 / t if t else None


def torch_copy_bandwidth(nbytes=2**30, busy=False) -> float | None:
  try:
    import torch

    if not torch.cuda.is_available():
      return None
    src = torch.randn(nbytes // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t = (
      timing.busy_torch(lambda: dst.copy_(src))
      if busy
      else time_torch(lambda: dst.copy_(src), repeats=20)
    )
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / t if t else None
  except Exception:  # noqa: BLE001 - no torch: the XLA number stands alone
    return None


def measure(quick=False) -> dict:
  out = {"xla_elementwise": xla_elementwise_bandwidth(8 * 2**20 if quick else 512 * 2**20)}
  if not quick:
    t = torch_copy_bandwidth()
    if t is not None:
      out["torch_copy"] = t
  out["ceiling"] = max(out.values())
  if timing.MODE["gpu_busy"] and not quick:
    # The same two measured as GPU-busy time, the denominator of gpu_tbps.
    busy = [xla_elementwise_bandwidth(busy=True), torch_copy_bandwidth(busy=True)]
    busy = [b for b in busy if b]
    if busy:
      out["gpu_busy_ceiling"] = max(busy)
  return out
