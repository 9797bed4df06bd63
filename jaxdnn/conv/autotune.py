"""conv's algorithm by timing (jaxdnn.config.benchmark, jaxdnn.autotune()):
for a call with algorithm=None and implementation=None, every algorithm
that serves the problem on this platform (each forced, so one that cannot
serve drops out at trace time) and XLA's own convolution run on fresh
random inputs of the call's shapes and dtypes; the fastest forward is kept
per (problem, dtypes, epilogue, platform, device kind, deterministic) in
memory and in the cache file (stamped with jaxdnn's version), and used by
every later call and process. The forward alone is timed (cuDNN's
benchmark mode picks each direction apart); a forced algorithm's gradients
follow it where they are served. Timing runs outside any trace the call is
in (jit, grad, vmap see only the winner); under vmap it times the
per-example problem."""

from __future__ import annotations

import os
import sys

import jax
import numpy as np

from jaxdnn import autotune_cache
from jaxdnn.bench.timing import time_jax
from jaxdnn.config import config

CANDIDATES = (
  ("implicit_gemm", dict(algorithm="implicit_gemm")),
  ("direct", dict(algorithm="direct")),
  ("winograd", dict(algorithm="winograd")),
  ("fft", dict(algorithm="fft")),
  ("xla", dict(implementation="xla")),
)
_REPEATS = 5  # median of 5 samples after a warm-up call (bench/timing.py)


def _xla_deterministic() -> bool:
  return "xla_gpu_deterministic_ops=true" in os.environ.get("XLA_FLAGS", "")


def candidates(platform: str):
  """The candidates config.deterministic admits: on a GPU XLA's convolutions
  (cuDNN's algorithms, some with atomic reductions) only when XLA runs
  deterministic ops."""
  for name, kwargs in CANDIDATES:
    if name == "xla" and platform == "gpu" and config.deterministic and not _xla_deterministic():
      continue
    yield name, kwargs


def key_of(g, x, w, bias, residual, kwargs) -> str:
  device = jax.devices()[0]
  fields = dict(
    g=repr(g),
    x=str(np.dtype(x.dtype)),
    w=str(np.dtype(w.dtype)),
    bias=None if bias is None else str(np.dtype(bias.dtype)),
    residual=None if residual is None else str(np.dtype(residual.dtype)),
    epilogue=sorted((k, repr(v)) for k, v in kwargs.items()),
    platform=device.platform,
    device=device.device_kind,
    deterministic=bool(config.deterministic),
  )
  return repr(sorted(fields.items()))


def _valid(entry) -> bool:
  names = dict(CANDIDATES)
  return (
    isinstance(entry, dict)
    and entry.get("choice") in names
    and isinstance(entry.get("times_ms"), dict)
  )


def choose(candidate, x, w, bias, residual, g, kwargs, *, measure=True):
  """(the winning candidate's name, a reason) for a conv call whose
  algorithm is left to jaxdnn, timing the candidates once where `measure`;
  (None, "") where nothing is known (or nothing served).
  candidate(name, forced) -> fn(x, w, bias, residual) runs one forced."""
  key = key_of(g, x, w, bias, residual, kwargs)
  entry = autotune_cache.lookup(key, config.autotune_cache)
  source = "cached"
  if not _valid(entry):
    if not measure:
      return None, ""
    with jax.ensure_compile_time_eval():  # run now, outside the caller's trace
      entry = _measure(candidate, x, w, bias, residual)
    if entry is None:
      return None, ""
    autotune_cache.store(key, entry, config.autotune_cache)
    source = "timed now"
  times = ", ".join(f"{k} {v:.3f} ms" for k, v in entry["times_ms"].items())
  return entry["choice"], f"jaxdnn.autotune ({source}): the fastest forward of {times}"


def _measure(candidate, x, w, bias, residual) -> dict | None:
  keys = jax.random.split(jax.random.key(0), 4)
  args = tuple(
    None if a is None else jax.random.normal(k, a.shape, np.float32).astype(a.dtype)
    for a, k in zip((x, w, bias, residual), keys)
  )
  times = {}
  for name, forced in candidates(jax.devices()[0].platform):
    fn = jax.jit(candidate(name, forced))
    try:
      fn.lower(*args)
    except ValueError:  # this algorithm does not serve the problem here
      continue
    try:
      times[name] = time_jax(fn, *args, warmup=1, repeats=_REPEATS) * 1e3
    except Exception as e:  # noqa: BLE001  (a candidate that fails to run is no candidate)
      print(f"jaxdnn autotune: conv candidate {name} failed ({e}): skipped", file=sys.stderr)
  if not times:
    return None
  best = min(times, key=times.get)
  shape = lambda a: "x".join(map(str, a.shape))
  print(
    f"jaxdnn autotune: conv x[{shape(x)}] w[{shape(w)}] {np.dtype(x.dtype).name}: "
    + ", ".join(f"{k} {v:.3f} ms" for k, v in times.items())
    + f" -> {best}",
    file=sys.stderr,
    flush=True,
  )
  return {"choice": best, "times_ms": times}
