"""Runs a table of invalid and edge-case arguments through one public op and
one implementation, one case at a time, printing a JSON line per case:

  python fuzz_runner.py OP IMPLEMENTATION

The tables live with their families (tests/<family>/fuzz_<family>.py,
fuzz_base.py). Outcome per case: "error" (raised, and the message names the
argument), "match" (returned a result equal to a float64 oracle, NaN where it
has NaN), "unnamed" (raised without naming the argument) or "wrong" (a result
that differs from the oracle). A "start" line precedes every case so that the
parent can name the case a crash happened in. Run with x64 enabled, so int64
and float64 inputs are real.
"""

from __future__ import annotations

import json
import sys
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from fuzz_base import fuzz_ops  # noqa: E402


def run(op_name, impl):
  op = fuzz_ops()[op_name]
  for name, arg, kw in op.cases(impl):
    print(json.dumps({"start": name}), flush=True)
    kw = dict(kw)
    kw.setdefault("implementation", impl)
    outcome, detail = call(op, arg, kw)
    print(json.dumps({"case": name, "outcome": outcome, "detail": detail[:300]}), flush=True)


def call(op, arg, kw):
  inputs = [kw.pop(name) for name in op.inputs]
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      got = op.fn(*inputs, **kw)
      got = np.asarray(jax.block_until_ready(got), np.float64)
  except Exception as e:  # noqa: BLE001 - every exception is classified
    msg = f"{type(e).__name__}: {e}"
    named = arg in msg or op.aliases.get(arg, arg) in msg
    return ("error" if named else "unnamed"), msg
  kw.pop("implementation", None)
  try:
    want = op.oracle(*inputs, **kw)
  except Exception as e:  # noqa: BLE001
    return "wrong", f"the op returned but the oracle refused: {e}"
  sixteen_bit = getattr(inputs[0], "dtype", None) in (jnp.bfloat16, jnp.float16)
  tol = 3e-2 if sixteen_bit else 2e-3
  scale = max(
    1.0, float(np.nanmax(np.abs(np.where(np.isfinite(want), want, 0))) if want.size else 1)
  )
  try:
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True)
  except AssertionError as e:
    return "wrong", str(e).replace("\n", " ")
  return "match", ""


if __name__ == "__main__":
  run(sys.argv[1], None if sys.argv[2] == "None" else sys.argv[2])
