"""Timing: warm up, then median over repeats of back-to-back calls."""

from __future__ import annotations

import statistics
import time

import jax


def _block(out):
  jax.block_until_ready(out)


def time_jax(fn, *args, warmup=3, repeats=15, calls=10):
  """Median seconds per call of a jitted `fn` (dispatch queued back to back)."""
  for _ in range(warmup):
    _block(fn(*args))
  samples = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    for _ in range(calls):
      out = fn(*args)
    _block(out)
    samples.append((time.perf_counter() - t0) / calls)
  return statistics.median(samples)


def time_jax_batched(fn, arg_sets, warmup=2, repeats=10):
  """Median seconds per application of `fn`, applied to each of the
  independent `arg_sets` inside one jit.

  One executable launches the k kernels back to back, so the host's
  per-call dispatch (tens of microseconds, as much as a whole norm kernel)
  is paid once per k applications instead of once per application.
  """
  k = len(arg_sets)
  many = jax.jit(lambda sets: [fn(*a) for a in sets])
  return time_jax(many, arg_sets, warmup=warmup, repeats=repeats, calls=1) / k


def time_torch(fn, warmup=3, repeats=15, calls=10):
  """Median seconds per call of a CUDA PyTorch callable, with CUDA events."""
  import torch
  for _ in range(warmup):
    fn()
  torch.cuda.synchronize()
  samples = []
  for _ in range(repeats):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
      fn()
    end.record()
    torch.cuda.synchronize()
    samples.append(start.elapsed_time(end) / 1e3 / calls)
  return statistics.median(samples)
