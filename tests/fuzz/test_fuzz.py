"""The fuzz table (fuzz_runner.py) through every implementation of every
public op: each case must end in an error naming its argument or in a result
equal to a float64 oracle. Each (op, implementation) runs in its own process,
so a crash is caught and named (the last case started)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
from conftest import on_gpu
from fuzz_base import fuzz_ops

RUNNER = pathlib.Path(__file__).with_name("fuzz_runner.py")
OPS = list(fuzz_ops())  # every family's tests/<family>/fuzz_<family>.py
IMPLS = ["None", "xla"] + (["cuda"] if on_gpu() else ["cpu"])
FUZZ_COUNTS = {}  # (op, impl) -> counts, printed by conftest's terminal summary


def run(op, impl):
  env = dict(os.environ, XLA_FLAGS="")  # one device is enough here
  proc = subprocess.run(
    [sys.executable, str(RUNNER), op, impl],
    capture_output=True,
    text=True,
    env=env,
    cwd="/",
    timeout=900,
  )
  started, results = None, []
  for line in proc.stdout.splitlines():
    record = json.loads(line)
    if "start" in record:
      started = record["start"]
    else:
      results.append(record)
      started = None
  crash = proc.returncode != 0 or started is not None
  return results, (started, proc.returncode, proc.stderr[-2000:]) if crash else None


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("op", OPS)
def test_fuzz(op, impl):
  results, crash = run(op, impl)
  counts = {"tried": len(results) + (1 if crash else 0), "clean": 0, "wrong": 0, "crash": 0}
  bad = []
  for r in results:
    if r["outcome"] in ("error", "match"):
      counts["clean"] += 1
    else:
      counts["wrong"] += 1
      bad.append(f"{r['case']}: {r['outcome']}: {r['detail']}")
  if crash:
    counts["crash"] += 1
    bad.append(f"crash in case {crash[0]!r} (exit {crash[1]}): {crash[2]}")
  FUZZ_COUNTS[(op, impl)] = counts
  assert not bad, "\n".join(bad)
