"""LayerNorm / RMSNorm over the hardening issue's grid, jaxdnn against the
"xla" composition on GPU-busy time.

The grid: widths {1, 3, 127, 768, 1000, 1024, 1536, 4097, 5120, 12288,
65536} x rows {1, 7, 1000, 4096, 16384} x dtypes {float32, bfloat16,
float16} x scale dtype {x's, float32}, every cell whose input is over 1 MB.
Per cell: forward, forward+backward (y and every gradient), and backward as
their difference, the same definition for both implementations.

Timing: each cell's four functions are compiled and warmed up, then run
back to back inside one CUPTI session (three sessions, medians), a PyTorch
fill kernel marking where one function's calls end and the next begin, so
hundreds of cells cost seconds each, not a profiler session per number.

    python -m jaxdnn.bench norms_grid [--out grid.json] [--dtypes float32]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn
from jaxdnn.bench import timing

WIDTHS = (1, 3, 127, 768, 1000, 1024, 1536, 4097, 5120, 12288, 65536)
ROWS = (1, 7, 1000, 4096, 16384)
DTYPES = ("float32", "bfloat16", "float16")
MIN_BYTES = 1 << 20
MARKER = "FillFunctor"


def grid(widths=WIDTHS, rows=ROWS, dtypes=DTYPES, scales=("same", "float32")):
  """(rows, width, dtype, scale dtype) of every cell over MIN_BYTES; `scales`
  picks the parameters' dtypes ("same": x's)."""
  out = []
  for dt in dtypes:
    item = np.dtype(dt).itemsize
    scale_dtypes = tuple(dict.fromkeys(dt if sc == "same" else sc for sc in scales))
    for w in widths:
      for r in rows:
        if r * w * item > MIN_BYTES:
          out += [(r, w, dt, sd) for sd in scale_dtypes]
  return out


def _functions(kind, impl):
  if kind == "layer":
    f = lambda x, s, b: jaxdnn.layer_norm(x, s, b, implementation=impl)
  else:
    f = lambda x, s, b: jaxdnn.rms_norm(x, s, implementation=impl)

  def fwd_bwd(x, dy, s, b):
    y, vjp = jax.vjp(f, x, s, b)
    return (y, *vjp(dy))

  return jax.jit(f), jax.jit(fwd_bwd)


def _inputs(rows, width, dtype, scale_dtype):
  k = jax.random.split(jax.random.key(rows * 7919 + width), 4)
  x = jax.random.normal(k[0], (rows, width), dtype)
  dy = jax.random.normal(k[1], (rows, width), dtype)
  s = (1.0 + 0.1 * jax.random.normal(k[2], (width,), jnp.float32)).astype(scale_dtype)
  b = (0.1 * jax.random.normal(k[3], (width,), jnp.float32)).astype(scale_dtype)
  return x, dy, s, b


def _segments(records, n):
  """Split time-ordered GPU records at the marker kernels into n segments of
  (duration, name) lists; None if the markers do not frame n segments."""
  records = sorted(records)
  marks = [i for i, r in enumerate(records) if MARKER in r[2]]
  if len(marks) != n + 1:
    return None
  return [[(d, name) for _, d, name in records[a + 1 : b]] for a, b in zip(marks, marks[1:])]


def time_together(calls_of, calls, repeats=3):
  """Median GPU-busy seconds per call of each (jitted fn, args) in
  `calls_of`, and each one's per-kernel microseconds per call."""
  import torch

  marker = torch.zeros(1, device="cuda")

  def run(_):
    for fn, args in calls_of:
      marker.fill_(1.0)
      torch.cuda.synchronize()
      out = None
      for _ in range(calls):
        out = fn(*args)
      jax.block_until_ready(out)
    marker.fill_(1.0)
    torch.cuda.synchronize()

  for fn, args in calls_of:  # compile and warm up outside the session
    jax.block_until_ready(fn(*args))
  samples = [[] for _ in calls_of]
  kernels = [{} for _ in calls_of]
  for _ in range(repeats):
    segs = _segments(timing.gpu_records(run, calls), len(calls_of))
    if segs is None:
      continue
    for i, seg in enumerate(segs):
      samples[i].append(sum(d for d, _ in seg) / calls / 1e6)
      for d, name in seg:
        kernels[i][name] = kernels[i].get(name, 0.0) + d / calls / repeats
  return [statistics.median(s) if s else None for s in samples], kernels


def run_cell(kind, rows, width, dtype, scale_dtype, calls=20):
  x, dy, s, b = _inputs(rows, width, dtype, scale_dtype)
  fns = []
  for impl in (None, "xla"):
    f, fb = _functions(kind, impl)
    fns += [(f, (x, s, b)), (fb, (x, dy, s, b))]
  (jf, jfb, xf, xfb), kernels = time_together(fns, calls)
  rec = dict(op=f"{kind}_norm", rows=rows, width=width, dtype=dtype, scale_dtype=scale_dtype)
  item = np.dtype(dtype).itemsize
  rec["bytes_fwd"], rec["bytes_bwd"] = 2 * rows * width * item, 3 * rows * width * item
  if None in (jf, jfb, xf, xfb):
    rec["error"] = "the marker kernels did not frame the calls"
    return rec
  rec.update(
    jaxdnn_us=dict(fwd=jf * 1e6, fwd_bwd=jfb * 1e6, bwd=(jfb - jf) * 1e6),
    xla_us=dict(fwd=xf * 1e6, fwd_bwd=xfb * 1e6, bwd=(xfb - xf) * 1e6),
  )
  rec["speedup"] = {
    d: rec["xla_us"][d] / rec["jaxdnn_us"][d] if rec["jaxdnn_us"][d] > 0 else None
    for d in ("fwd", "bwd", "fwd_bwd")
  }
  if min(v for v in rec["speedup"].values() if v is not None) < 1.0:
    names = ("jaxdnn fwd", "jaxdnn fwd+bwd", "xla fwd", "xla fwd+bwd")
    rec["kernels_us"] = {
      n: {k[:90]: round(v, 2) for k, v in kk.items()} for n, kk in zip(names, kernels)
    }
  return rec


def _cell(r):
  return f"{r['op']:<11}{r['rows']:>6}x{r['width']:<6}{r['dtype']:<9}{r['scale_dtype']:<9}"


def print_row(r):
  if "error" in r:
    print(f"{_cell(r)} {r['error']}")
    return
  j, x, sp = r["jaxdnn_us"], r["xla_us"], r["speedup"]
  flag = " <" if min(v for v in sp.values() if v is not None) < 1.0 else ""
  print(
    f"{_cell(r)}"
    f"{j['fwd']:>9.1f}{x['fwd']:>9.1f}{sp['fwd']:>7.2f}x"
    f"{j['bwd']:>9.1f}{x['bwd']:>9.1f}{sp['bwd']:>7.2f}x"
    f"{j['fwd_bwd']:>9.1f}{x['fwd_bwd']:>9.1f}{sp['fwd_bwd']:>7.2f}x{flag}",
    flush=True,
  )


def summary(records):
  ok = [r for r in records if "speedup" in r]
  lines = [f"cells: {len(ok)} measured, {len(records) - len(ok)} failed"]
  for d in ("fwd", "bwd", "fwd_bwd"):
    vals = [(r["speedup"][d], r) for r in ok if r["speedup"][d] is not None]
    below = [v for v in vals if v[0] < 1.0]
    worst = min(vals, key=lambda v: v[0]) if vals else None
    geo = float(np.exp(np.mean([np.log(v) for v, _ in vals]))) if vals else float("nan")
    w = " ".join(_cell(worst[1]).split())
    lines.append(
      f"{d:<8}geomean {geo:.2f}x, below 1.0x: {len(below)}/{len(vals)}, worst {worst[0]:.2f}x ({w})"
    )
  return lines


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  ap = argparse.ArgumentParser(prog="python -m jaxdnn.bench norms_grid")
  ap.add_argument("--out", help="write the records as JSON here")
  ap.add_argument("--dtypes", default=",".join(DTYPES))
  ap.add_argument("--widths", default=",".join(map(str, WIDTHS)))
  ap.add_argument("--rows", default=",".join(map(str, ROWS)))
  ap.add_argument("--scales", default="same,float32", help="parameter dtypes: same (x's), float32")
  ap.add_argument("--ops", default="layer,rms")
  ap.add_argument("--calls", type=int, default=20)
  a = ap.parse_args(argv)
  if jax.default_backend() != "gpu":
    print("norms_grid times GPU kernels (CUPTI); no GPU here", file=sys.stderr)
    return 2
  cells = grid(
    tuple(int(v) for v in a.widths.split(",")),
    tuple(int(v) for v in a.rows.split(",")),
    tuple(a.dtypes.split(",")),
    tuple(a.scales.split(",")),
  )
  device = jax.devices()[0].device_kind
  print(f"device: {device}, jax {jax.__version__}; {len(cells)} cells per op; GPU-busy us per call")
  print(
    f"{'op':<11}{'rows x width':>13}{'dtype':<9}{'scale':<9}"
    f"{'fwd':>9}{'xla':>9}{'':>8}{'bwd':>9}{'xla':>9}{'':>8}{'fwd+bwd':>9}{'xla':>9}"
  )
  records = []
  for kind in a.ops.split(","):
    for rows, width, dt, sd in cells:
      try:
        r = run_cell(kind, rows, width, dt, sd, calls=a.calls)
      except Exception as e:  # noqa: BLE001 - a failing cell is reported, the grid goes on
        r = dict(op=f"{kind}_norm", rows=rows, width=width, dtype=dt, scale_dtype=sd)
        r["error"] = f"{type(e).__name__}: {str(e)[:200]}"
      print_row(r)
      records.append(r)
      _write(a.out, device, records)  # after every cell: a run cut short keeps what it measured
  for line in summary(records):
    print(line)
  return 0


def _write(path, device, records):
  if path:
    with open(path, "w") as f:
      json.dump(dict(device=device, jax=jax.__version__, records=records), f, indent=1)
