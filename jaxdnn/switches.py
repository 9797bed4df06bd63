"""jaxdnn's environment switches (JAXDNN_*), for A/B runs on a GPU.

The table lives in C++ (cpp/common/switches.def), where every kernel reads
it once; this module only renders it. `python -m jaxdnn.switches` prints
docs/switches.md (a test checks that the committed page matches).
"""

from __future__ import annotations

import sys

from jaxdnn import _extension


def table() -> list[tuple[str, str, str, str, str]]:
  """(name, type, default, allowed, meaning) for every switch, in table order."""
  return _extension.switches()


def value(name: str) -> str:
  """The value in force in this process (the default when unset or not allowed)."""
  return _extension.cpu_module.switch_value(name)


def markdown() -> str:
  lines = [
    "# Environment switches",
    "",
    "Generated from `cpp/common/switches.def` by `python -m jaxdnn.switches`;",
    "a test checks that this page matches the table. Each switch is read once,",
    "at its first use in the process; a value outside `allowed` (or none)",
    "reads as the default, which is the measured winner (`docs/perf/`).",
    "`lo..hi` admits any number in the range.",
    "",
    "| switch | type | default | allowed | meaning |",
    "|---|---|---|---|---|",
  ]
  for name, kind, default, allowed, meaning in table():
    allowed = allowed.replace("|", "\\|")  # a pipe inside a table cell
    lines.append(f"| `{name}` | {kind} | `{default}` | `{allowed}` | {meaning} |")
  return "\n".join(lines) + "\n"


if __name__ == "__main__":
  sys.stdout.write(markdown())
