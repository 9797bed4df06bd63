"""Timing: warm up, then median over repeats of back-to-back calls."""

from __future__ import annotations

import statistics
import time

import jax


def _block(out):
  jax.block_until_ready(out)


def time_jax(fn, *args, warmup=3, repeats=15, calls=None, sample_seconds=3e-3):
  """Median seconds per call of a jitted `fn` (dispatch queued back to back).

  Each sample queues `calls` calls and waits once; by default enough calls
  that a sample spans `sample_seconds`, so the first dispatch and the final
  wait (tens of microseconds) add little to each call of a short kernel.
  """
  for _ in range(warmup):
    _block(fn(*args))
  if calls is None:
    t0 = time.perf_counter()
    for _ in range(3):
      out = fn(*args)
    _block(out)
    per_call = (time.perf_counter() - t0) / 3
    calls = int(min(100, max(10, sample_seconds / max(per_call, 1e-7))))
  samples = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    for _ in range(calls):
      out = fn(*args)
    _block(out)
    samples.append((time.perf_counter() - t0) / calls)
  return statistics.median(samples)


# Applications per jit call: 1 (default: each call times one kernel launch
# plus dispatch, which the queue hides for ~100 us kernels) or a chain.
MODE = {"chain_length": 1, "gpu_busy": False, "kernels": False}


def time_jax_chained(step, init, length=None, warmup=2, repeats=10):
  """Median seconds per application of `step` (state -> next state, same
  structure), applied `length` times in a row inside one jit.

  One executable runs the kernels back to back, so host dispatch (tens of
  microseconds, as much as a whole norm kernel) is paid once per `length`
  applications. An optimization barrier between applications stops XLA
  from fusing one into the next, so each costs what it costs alone.
  """
  length = length or MODE["chain_length"]
  if length == 1:
    return time_jax(jax.jit(step), init, warmup=warmup, repeats=repeats)

  def chain(state):
    for _ in range(length):
      state = jax.lax.optimization_barrier(step(state))
    return state

  return time_jax(jax.jit(chain), init, warmup=warmup, repeats=repeats, calls=1) / length


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


# GPU-busy time (opt-in, `--gpu-busy`): the summed duration of the kernels,
# memsets and memcpys the GPU ran during N calls, from CUPTI records
# (torch.profiler's collector sees every launch in the process, jax's too).
# It leaves out what the host-timed figure adds: idle GPU time between two
# calls (dispatch, the final wait). It is what an op costs inside a larger
# jitted program, and it is measured the same way for every implementation
# and for the copy ceiling. Needs PyTorch with CUDA; None otherwise.
_GPU_CATEGORIES = ("kernel", "gpu_memset", "gpu_memcpy")


def gpu_records(run, calls):
  """[(start_us, duration_us)] of every kernel, memset and memcpy the GPU ran
  during `run(calls)`, from CUPTI (None without PyTorch's profiler)."""
  try:
    import json
    import os
    import tempfile

    from torch.profiler import ProfilerActivity, profile
  except Exception:  # noqa: BLE001 - no PyTorch: no GPU records
    return None
  with profile(activities=[ProfilerActivity.CUDA]) as prof:
    run(calls)
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
      events = json.load(f)["traceEvents"]
  return [
    (e["ts"], e["dur"], e.get("name", "?"))
    for e in events
    if e.get("cat") in _GPU_CATEGORIES and "dur" in e
  ]


def _busy_seconds(run, calls, repeats=3):
  samples = []
  for _ in range(repeats):
    recs = gpu_records(run, calls)
    if recs is None:
      return None
    if recs:
      samples.append(sum(r[1] for r in recs) / 1e6 / calls)
  return statistics.median(samples) if samples else None


def jax_runner(fn, *args):
  """run(n): n calls of a jitted `fn` queued back to back, then one wait
  (after one warm-up call)."""
  _block(fn(*args))

  def run(n):
    out = None
    for _ in range(n):
      out = fn(*args)
    _block(out)

  return run


def torch_runner(fn):
  """run(n): n calls of a CUDA PyTorch callable, then a device sync."""
  import torch

  fn()
  torch.cuda.synchronize()

  def run(n):
    for _ in range(n):
      fn()
    torch.cuda.synchronize()

  return run


def kernel_lines(run, calls=10):
  """Per-kernel GPU time of one call, longest first: ["  12.3 us  x1  name"]
  (what a slow case spends its time on; None without PyTorch)."""
  recs = gpu_records(run, calls)
  if recs is None:
    return None
  per = {}
  for _, d, name in recs:
    t, n = per.get(name, (0.0, 0))
    per[name] = (t + d, n + 1)
  rows = sorted(per.items(), key=lambda kv: -kv[1][0])
  return [f"  {t / calls:9.1f} us  x{n / calls:<4g} {name[:110]}" for name, (t, n) in rows]


def busy_jax(fn, *args, calls=20):
  """Median GPU-busy seconds per call of a jitted `fn`; None unless
  MODE["gpu_busy"] is on (and PyTorch is there)."""
  return _busy_seconds(jax_runner(fn, *args), calls) if MODE["gpu_busy"] else None


def busy_torch(fn, calls=20):
  """Median GPU-busy seconds per call of a CUDA PyTorch callable; None unless
  MODE["gpu_busy"] is on."""
  return _busy_seconds(torch_runner(fn), calls) if MODE["gpu_busy"] else None
