"""The shared table of memory-bound families (norms, and later softmax,
BatchNorm, pooling): GB moved per call against the measured copy bandwidth,
host-timed and (with --gpu-busy) GPU-busy, every anchor in the same process."""

from __future__ import annotations

import argparse
import json
import os
import sys

import jax
import jax.numpy as jnp

from jaxdnn.bench import ceilings, timing
from jaxdnn.bench.ratios import add_ratios


def row(name, direction, seconds, nbytes, busy=None):
  """One table record: time and bandwidth (and GPU-busy, when measured)."""
  r = dict(impl=name, direction=direction, time_us=seconds * 1e6, tbps=nbytes / seconds / 1e12)
  if busy:  # GPU-busy time (timing.MODE["gpu_busy"])
    r.update(gpu_us=busy * 1e6, gpu_tbps=nbytes / busy / 1e12)
  return r


def difference_row(name, t_fb, t_f, nbytes_bwd, b_fb=None, b_f=None):
  """Backward as (fwd+bwd) - fwd; flagged when noise makes it meaningless."""
  t_b = t_fb - t_f
  if t_b < 0.2 * t_f:
    return dict(
      impl=name,
      direction="bwd",
      error=f"unreliable: fwd+bwd {t_fb * 1e6:.1f} us vs fwd {t_f * 1e6:.1f} us",
    )
  return row(name, "bwd", t_b, nbytes_bwd, b_fb - b_f if b_fb and b_f else None)


def direction_rows(name, t_f, t_fb, nb_f, nb_b, b_f=None, b_fb=None):
  """The fwd, bwd (as a difference) and fwd+bwd records of one implementation."""
  return [
    row(name, "fwd", t_f, nb_f, b_f),
    difference_row(name, t_fb, t_f, nb_b, b_fb, b_f),
    row(name, "fwd+bwd", t_fb, nb_f + nb_b, b_fb),
  ]


def jax_rows(name, f, args, cot, nb_f, nb_b):
  """fwd, bwd and fwd+bwd records of f(*args), the backward pulling `cot`
  (timed host-side and, when asked, GPU-busy); a failure becomes a record."""

  def fwd_bwd(state):
    args, cot = state
    y, vjp = jax.vjp(f, *args)
    return y, vjp(cot)

  try:
    t_f = timing.time_jax_chained(lambda a: f(*a), args)
    t_fb = timing.time_jax_chained(fwd_bwd, (args, cot))
    b_f = timing.busy_jax(jax.jit(lambda a: f(*a)), args)
    b_fb = timing.busy_jax(jax.jit(fwd_bwd), (args, cot))
    if timing.MODE["kernels"]:
      for label, fn, a in (("fwd", lambda a: f(*a), args), ("fwd+bwd", fwd_bwd, (args, cot))):
        lines = timing.kernel_lines(timing.jax_runner(jax.jit(fn), a))
        print(f"kernels of {name} {label} {[getattr(x, 'shape', ()) for x in args]}:")
        print("\n".join(lines or ["  (no PyTorch profiler)"]))
  except Exception as e:  # noqa: BLE001 - reported in the table
    return [dict(impl=name, error=f"{type(e).__name__}: {str(e)[:200]}")]
  return direction_rows(name, t_f, t_fb, nb_f, nb_b, b_f, b_fb)


def torch_rows(make_fn, args, cot, nb_f, nb_b, name="torch"):
  """The same records for PyTorch on the GPU: make_fn(torch) -> fn(*tensors)
  (PyTorch's own ops, or another PyTorch library's under `name`); nothing
  without a CUDA PyTorch."""
  try:
    import torch

    if not torch.cuda.is_available():
      return []
    import numpy as np

    to = lambda a: (
      torch.from_numpy(np.array(a.astype(jnp.float32)))
      .cuda()
      .to(getattr(torch, np.dtype(a.dtype).name))
    )
    targs, tcot = [to(a) for a in args], to(cot)
    fn = make_fn(torch)
    with torch.no_grad():
      t_f = timing.time_torch(lambda: fn(*targs))
      b_f = timing.busy_torch(lambda: fn(*targs))
    gargs = [a.clone().requires_grad_(True) for a in targs]

    def fb():
      fn(*gargs).backward(tcot)
      for a in gargs:
        a.grad = None

    t_fb = timing.time_torch(fb)
    b_fb = timing.busy_torch(fb)
  except Exception as e:  # noqa: BLE001
    return [dict(impl=name, error=f"{type(e).__name__}: {str(e)[:200]}")]
  return direction_rows(name, t_f, t_fb, nb_f, nb_b, b_f, b_fb)


def print_table(records, copy_tbps, busy_tbps=None):
  print(f"\nmemory ceiling (read+write, best of the measurements above): {copy_tbps:.2f} TB/s")
  if busy_tbps:
    print(f"GPU-busy ceiling (the same copies, CUPTI kernel time): {busy_tbps:.2f} TB/s")
  hdr = f"{'op':<14}{'case':<12}{'dir':<11}{'impl':<8}{'us':>9}{'TB/s':>7}{'%copy':>7}  speedup"
  print(hdr)
  print("-" * len(hdr))
  for r in records:
    if "error" in r:
      print(f"{r['op']:<14}{r['case']:<12}{'':<11}{r['impl']:<8} failed: {r['error'][:60]}")
      continue
    sp = " ".join(f"{k}:{v:.2f}x" for k, v in r.get("speedup_vs", {}).items())
    busy = ""
    if r.get("gpu_us") and busy_tbps:
      gsp = " ".join(f"{k}:{v:.2f}x" for k, v in r.get("gpu_speedup_vs", {}).items())
      busy = (
        f"  | GPU-busy {r['gpu_us']:.1f} us {r['gpu_tbps']:.2f} TB/s "
        f"{100 * r['gpu_tbps'] / busy_tbps:.0f}% {gsp}"
      )
    print(
      f"{r['op']:<14}{r['case']:<12}{r['direction']:<11}{r['impl']:<8}"
      f"{r['time_us']:>9.1f}{r['tbps']:>7.2f}{100 * r['tbps'] / copy_tbps:>6.0f}%  {sp}{busy}"
    )


def main(family, run, argv=None):
  """The memory-bound table for `family`: `run(**kw)` returns its records."""
  argv = sys.argv[1:] if argv is None else argv
  ap = argparse.ArgumentParser(prog=f"python -m jaxdnn.bench {family}")
  ap.add_argument("--out", help="write the records as JSON here")
  ap.add_argument("--quick", action="store_true", help="small cases (CPU smoke run)")
  ap.add_argument("--cases", help="comma-separated ROWSxDIM, e.g. 32768x4096,8192x8192")
  ap.add_argument(
    "--impls", help="comma-separated anchors to run besides jaxdnn (xla,pallas,torch)"
  )
  ap.add_argument("--dtype", help="the inputs' dtype (default: the family's, bfloat16)")
  ap.add_argument("--ops", help="comma-separated ops of the family to run (default: all)")
  ap.add_argument(
    "--chain", type=int, default=1, help="applications per jit call (1: one call per application)"
  )
  ap.add_argument(
    "--gpu-busy",
    action="store_true",
    help="also record GPU-busy time per call from CUPTI (needs PyTorch)",
  )
  ap.add_argument(
    "--kernels",
    action="store_true",
    help="print each case's GPU time per kernel, per implementation (needs PyTorch)",
  )
  args = ap.parse_args(argv)
  timing.MODE["kernels"] = args.kernels
  timing.MODE["chain_length"] = args.chain
  timing.MODE["gpu_busy"] = args.gpu_busy
  ceil = ceilings.measure(quick=args.quick)
  busy_bps = ceil.pop("gpu_busy_ceiling", None)
  copy_bps = ceil["ceiling"]
  kw = dict(cases=[(256, 1024)], with_torch=False) if args.quick else {}
  if args.cases:
    kw["cases"] = [tuple(int(v) for v in c.split("x")) for c in args.cases.split(",")]
  if args.dtype:
    kw["dtype"] = jnp.dtype(args.dtype)
  if args.ops:
    kw["ops"] = set(args.ops.split(","))
  if args.impls is not None:
    kw["impls"] = set(filter(None, args.impls.split(",")))
  records = run(**kw)
  add_ratios(records)
  for r in records:
    if "tbps" in r:
      r["fraction_of_copy"] = r["tbps"] * 1e12 / copy_bps
    if r.get("gpu_tbps") and busy_bps:
      r["gpu_fraction_of_copy"] = r["gpu_tbps"] * 1e12 / busy_bps
  device = jax.devices()[0]
  print(f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}")
  print("bandwidth measured: " + ", ".join(f"{k} {v / 1e12:.2f} TB/s" for k, v in ceil.items()))
  print_table(records, copy_bps / 1e12, busy_bps / 1e12 if busy_bps else None)
  if args.out:
    with open(args.out, "w") as f:
      json.dump(
        dict(
          device=device.device_kind,
          backend=jax.default_backend(),
          chain_length=args.chain,
          xla_flags=os.environ.get("XLA_FLAGS", ""),
          jax=jax.__version__,
          copy_tbps=copy_bps / 1e12,
          gpu_busy_copy_tbps=busy_bps / 1e12 if busy_bps else None,
          bandwidth_tbps={k: v / 1e12 for k, v in ceil.items()},
          records=records,
        ),
        f,
        indent=1,
      )
  return 0
