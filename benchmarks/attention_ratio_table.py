"""Per-case ratios of an attention benchmark JSON (python -m jaxdnn.bench attention --out).

  python3 benchmarks/attention_ratio_table.py FILE.json [--seq-min 2048]
For each dense case: jaxdnn's forward TFLOP/s, then anchor time / jaxdnn time
for the forward, the backward alone ((fwd+bwd) - fwd) and fwd+bwd, host-timed
and, where the run had --gpu-busy, GPU-busy ("wall busy" pairs); geometric
means and minima over the cases with seq >= --seq-min.
"""

import argparse
import json
import math


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("file")
  ap.add_argument("--seq-min", type=int, default=2048)
  a = ap.parse_args()
  d = json.load(open(a.file))
  recs = {(r["case"], r["direction"], r["impl"]): r for r in d["records"] if "time_us" in r}
  cases = list(dict.fromkeys(r["case"] for r in d["records"] if r["op"] == "attention"))
  anchors = [i for i in ("cudnn", "tokamax", "torch") if any(k[2] == i for k in recs)]

  def t(case, direction, impl, key):
    if direction == "bwd":
      fb, f = t(case, "fwd+bwd", impl, key), t(case, "fwd", impl, key)
      return fb - f if fb and f else None
    return recs.get((case, direction, impl), {}).get(key)

  def ratio(case, direction, impl, key):
    x, y = t(case, direction, impl, key), t(case, direction, "jaxdnn", key)
    return x / y if x and y else float("nan")

  cols = [
    (d_, i) for i in anchors for d_ in (("fwd", "bwd", "fwd+bwd") if i == "cudnn" else ("fwd+bwd",))
  ]
  print(f"{'case':18s}{'fwd TF/s':>9s}  " + "  ".join(f"{d_ + ' vs ' + i:>20s}" for d_, i in cols))
  means = {c: [] for c in cols}
  for case in cases:
    if (case, "fwd", "jaxdnn") not in recs:
      continue
    cells = []
    for c in cols:
      w, b = ratio(case, *c, "time_us"), ratio(case, *c, "gpu_us")
      cells.append(f"{w:9.2f} {b:10.2f}")
      if int(case.split("s")[1].split("d")[0]) >= a.seq_min and not math.isnan(w):
        means[c].append((w, b))
    print(f"{case:18s}{recs[(case, 'fwd', 'jaxdnn')]['tflops']:9.0f}  " + "  ".join(cells))
  print(f"seq >= {a.seq_min}, geomean (min), wall / busy:")
  for c, v in means.items():
    if v:
      g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
      w, b = [x[0] for x in v], [x[1] for x in v if not math.isnan(x[1])]
      print(
        f"  {c[0]} vs {c[1]}: {g(w):.3f} ({min(w):.2f}) / "
        + (f"{g(b):.3f} ({min(b):.2f})" if b else "-")
      )


if __name__ == "__main__":
  main()
