"""What the fuzz runner (fuzz_runner.py) and its table (test_fuzz.py) share
with the families: each family's tests/<family>/fuzz_<family>.py defines
FUZZ_OPS, {public op name: FuzzOp}, so a new family adds its table in its own
room. Importing this module changes no JAX setting (the runner turns x64 on
before it imports the tables; the parent process only lists their ops).
"""

from __future__ import annotations

import dataclasses
import importlib
import pathlib
import sys
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

RNG = np.random.default_rng(0)


def rand(shape, dtype=np.float32, lo=-1.0, hi=1.0):
  x = RNG.uniform(lo, hi, size=shape)
  x[x == 0] = 0.5  # never zeros
  return jnp.asarray(x.astype(dtype))


@dataclasses.dataclass(frozen=True)
class FuzzOp:
  """One public op's fuzz table.

  cases(impl) -> [(case name, the argument it probes, keyword arguments)];
  inputs: the names, in `kw`, of the op's positional inputs (the first one's
  dtype picks the tolerance: 16-bit or not); fn(*inputs, **kw): the op;
  oracle(*inputs, **kw): the float64 numpy result (kw without
  `implementation`); aliases: other words an error may use for an argument.
  """

  cases: Callable
  inputs: tuple
  fn: Callable
  oracle: Callable
  aliases: dict = dataclasses.field(default_factory=dict)


def fuzz_ops() -> dict:
  """Every family's FUZZ_OPS, in folder order."""
  ops = {}
  tests = pathlib.Path(__file__).resolve().parent.parent
  for path in sorted(tests.glob("*/fuzz_*.py")):
    if path.parent.name == "fuzz":
      continue
    if str(path.parent) not in sys.path:
      sys.path.append(str(path.parent))
    ops.update(importlib.import_module(path.stem).FUZZ_OPS)
  return ops
