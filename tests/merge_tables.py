"""Joins the composability and fuzz tables of a split test run (the shards of
benchmarks/gpu_run.sh each leave a RESULTS_JSON file) into one markdown page.

  python tests/merge_tables.py SHARD.json... > tables.md
"""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import conformance  # noqa: E402


def main(paths):
  fuzz = {}
  for path in paths:
    data = json.loads(pathlib.Path(path).read_text())
    conformance.load(data["conformance"])
    for op, impl, counts in data["fuzz"]:
      fuzz[(op, impl)] = counts
  print("# Composability: op x transformation\n")
  print(conformance.table() or "(no conformance test ran)")
  if fuzz:
    print("\n# Fuzz table: cases per op and implementation\n")
    print("| op | implementation | tried | clean | wrong | crash |")
    print("|---|---|---|---|---|---|")
    for (op, impl), c in sorted(fuzz.items()):
      print(f"| {op} | {impl} | {c['tried']} | {c['clean']} | {c['wrong']} | {c['crash']} |")


if __name__ == "__main__":
  main(sys.argv[1:])
