"""Speedups of jaxdnn against each anchor timed in the same run."""

from __future__ import annotations


def add_ratios(records):
  """Adds `speedup_vs` {anchor: anchor time / jaxdnn time} to jaxdnn's records,
  per (op, case, direction)."""
  by_key = {}
  for r in records:
    if "time_us" in r:
      by_key.setdefault((r["op"], r["case"], r["direction"]), {})[r["impl"]] = r["time_us"]
  for r in records:
    if r.get("impl") == "jaxdnn" and "time_us" in r:
      others = by_key[(r["op"], r["case"], r["direction"])]
      r["speedup_vs"] = {k: v / r["time_us"] for k, v in others.items() if k != "jaxdnn"}
