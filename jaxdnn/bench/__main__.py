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

# Tables under the names the issues use: name -> (family, module).
EXTRA = {
  "act": ("activations", "bench"),
  "loss": ("softmax", "loss_bench"),
  "pool": ("pooling", "bench"),
  "norms_grid": ("norms", "grid_bench"),
  "rnn": ("recurrent", "bench"),
  "conv_compile": ("conv", "compile_bench"),
  "paged": ("attention", "paged_bench"),
}


def benchmarked_families():
  return [f for f in FAMILIES if importlib.util.find_spec(f"jaxdnn.{f}.bench") is not None]


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  tables = {f: (f, "bench") for f in benchmarked_families()} | EXTRA
  if not argv or argv[0] not in tables:
    print(f"usage: python -m jaxdnn.bench {{{','.join(tables)}}} [--help]", file=sys.stderr)
    return 2
  family, module = tables[argv[0]]
  return importlib.import_module(f"jaxdnn.{family}.{module}").main(argv[1:])


if __name__ == "__main__":
  sys.exit(main())
