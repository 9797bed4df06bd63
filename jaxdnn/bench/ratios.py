"""Speedups of jaxdnn against each anchor timed in the same run."""

from __future__ import annotations


def add_ratios(records):
  """Adds `speedup_vs` {anchor: anchor time / jaxdnn time} to jaxdnn's records,
  per (op, case, direction), from the host-timed `time_us`; and, where the
  GPU-busy times were measured (`gpu_us`), `gpu_speedup_vs` from those."""
  for time_key, out_key in (("time_us", "speedup_vs"), ("gpu_us", "gpu_speedup_vs")):
    by_key = {}
    for r in records:
      if r.get(time_key):
        by_key.setdefault((r["op"], r["case"], r["direction"]), {})[r["impl"]] = r[time_key]
    for r in records:
      if r.get("impl") == "jaxdnn" and r.get(time_key):
        others = by_key[(r["op"], r["case"], r["direction"])]
        r[out_key] = {k: v / r[time_key] for k, v in others.items() if k != "jaxdnn"}
