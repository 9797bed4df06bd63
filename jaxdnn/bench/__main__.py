"""python -m jaxdnn.bench FAMILY [args]: one family's benchmark table and JSON.

Every family in jaxdnn._families.FAMILIES that has a `bench` module
(jaxdnn/<family>/bench.py, exposing main(argv)) is listed here.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # room for PyTorch too

from jaxdnn._families import FAMILIES  # noqa: E402

# The short names the issues use for some families' tables.
ALIASES = {"act": "activations", "loss": "softmax"}


def benchmarked_families():
  return [f for f in FAMILIES if importlib.util.find_spec(f"jaxdnn.{f}.bench") is not None]


def main(argv=None):
  argv = list(sys.argv[1:] if argv is None else argv)
  families = benchmarked_families()
  if argv and argv[0] in ALIASES:
    argv[0] = ALIASES[argv[0]]
  if not argv or argv[0] not in families:
    print(f"usage: python -m jaxdnn.bench {{{','.join(families)}}} [--help]", file=sys.stderr)
    return 2
  return importlib.import_module(f"jaxdnn.{argv[0]}.bench").main(argv[1:])


if __name__ == "__main__":
  sys.exit(main())
