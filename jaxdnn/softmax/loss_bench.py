"""python -m jaxdnn.bench loss: the fused linear + cross-entropy against the
unfused compositions, forward+backward (the gradients of hidden and weight)
in one process: time (host median and GPU-busy), the rate of its matmuls,
and the temporary memory of the compiled executable (XLA's memory analysis).

  linear_ce   jaxdnn.linear_cross_entropy (chunks; kernels inside)
  unfused     hidden @ weight, then jaxdnn.softmax_cross_entropy
  xla         hidden @ weight, then the plain-JAX log-softmax + NLL
The matmul rate counts the three [tokens x features x vocab] matmuls of the
unfused backward pass and its forward (6 x tokens x features x vocab FLOPs).
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp

import jaxdnn
from jaxdnn.bench import timing

CASES = [(8192, 4096, 128256), (8192, 4096, 32000), (8192, 4096, 256000)]


def _fns(labels):
  ce = jaxdnn.softmax_cross_entropy
  return {
    "linear_ce": lambda h, w: jaxdnn.linear_cross_entropy(h, w, labels),
    "unfused": lambda h, w: ce(h @ w, labels),
    "xla": lambda h, w: jaxdnn.linear_cross_entropy(h, w, labels, implementation="xla"),
  }


def _liger_records(h, w, labels, flops, case):
  """Liger's fused linear cross-entropy (PyTorch, Triton) on the same data,
  forward+backward: time, and the peak memory it allocates beyond its inputs."""
  import numpy as np

  from jaxdnn.bench import liger

  L = liger.ops()
  if L is None:
    return []
  rec = dict(op="linear_cross_entropy", case=case, impl="liger")
  try:
    import torch

    to = lambda a, dt: torch.from_numpy(np.array(a.astype(jnp.float32))).cuda().to(dt)
    th = to(h, torch.bfloat16).requires_grad_(True)
    tw = to(w.T, torch.bfloat16).requires_grad_(True)  # [vocab, features], PyTorch's layout
    ty = torch.from_numpy(np.asarray(labels, np.int64)).cuda()
    loss = liger.linear_cross_entropy(ty)

    def step():
      loss(th, tw).backward()
      th.grad = tw.grad = None

    step()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    # Less the gradients, which XLA counts as outputs rather than temporaries.
    grads = th.numel() * 2 + tw.numel() * 2
    rec["temp_mb"] = (torch.cuda.max_memory_allocated() - base - grads) / 2**20
    t = timing.time_torch(step, warmup=1, repeats=5, calls=3)
    rec.update(time_us=t * 1e6, tflops=flops / t / 1e12)
    busy = timing.busy_torch(step, calls=5)
    if busy:
      rec.update(gpu_us=busy * 1e6, gpu_tflops=flops / busy / 1e12)
  except Exception as e:  # noqa: BLE001 - reported in the table
    rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
  return [rec]


def run(cases=CASES, dtype=jnp.bfloat16, impls=None):
  records = []
  for tokens, features, vocab in cases:
    k = jax.random.split(jax.random.key(tokens + vocab), 3)
    h = jax.random.normal(k[0], (tokens, features), jnp.float32).astype(dtype)
    w = (jax.random.normal(k[1], (features, vocab), jnp.float32) * features**-0.5).astype(dtype)
    labels = jax.random.randint(k[2], (tokens,), 0, vocab)
    flops = 6.0 * tokens * features * vocab
    for name, f in _fns(labels).items():
      if impls is not None and name != "linear_ce" and name not in impls:
        continue
      rec = dict(op="linear_cross_entropy", case=f"{tokens}x{features}x{vocab}", impl=name)
      try:
        step = jax.jit(jax.value_and_grad(f, (0, 1)))
        mem = step.lower(h, w).compile().memory_analysis()
        rec["temp_mb"] = mem.temp_size_in_bytes / 2**20
        t = timing.time_jax(step, h, w, warmup=2, repeats=7)
        rec.update(time_us=t * 1e6, tflops=flops / t / 1e12)
        if timing.MODE["gpu_busy"]:
          busy = timing.busy_jax(step, h, w, calls=5)
          if busy:
            rec.update(gpu_us=busy * 1e6, gpu_tflops=flops / busy / 1e12)
      except Exception as e:  # noqa: BLE001 - reported in the table
        rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
      records.append(rec)
    if impls is None or "liger" in impls:
      records += _liger_records(h, w, labels, flops, f"{tokens}x{features}x{vocab}")
    del h, w
  base = {(r["case"], r["impl"]): r for r in records if "time_us" in r}
  for r in records:
    for other in ("unfused", "xla", "liger"):
      o = base.get((r["case"], other))
      if r["impl"] == "linear_ce" and o and "time_us" in r:
        r.setdefault("speedup_vs", {})[other] = o["time_us"] / r["time_us"]
        r.setdefault("memory_ratio_vs", {})[other] = o["temp_mb"] / max(r["temp_mb"], 1e-9)
  return records


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  ap = argparse.ArgumentParser(prog="python -m jaxdnn.bench loss")
  ap.add_argument("--out", help="write the records as JSON here")
  ap.add_argument("--cases", help="comma-separated TOKENSxFEATURESxVOCAB")
  ap.add_argument("--dtype", default="bfloat16")
  ap.add_argument("--impls", help="anchors besides jaxdnn (unfused,xla,liger)")
  ap.add_argument("--quick", action="store_true", help="a small case (CPU smoke run)")
  ap.add_argument("--gpu-busy", action="store_true", help="also record GPU-busy time (CUPTI)")
  args = ap.parse_args(argv)
  timing.MODE["gpu_busy"] = args.gpu_busy
  cases = CASES
  if args.quick:
    cases = [(256, 64, 1000)]
  if args.cases:
    cases = [tuple(int(v) for v in c.split("x")) for c in args.cases.split(",")]
  impls = set(args.impls.split(",")) if args.impls else None
  records = run(cases, jnp.dtype(args.dtype), impls)
  device = jax.devices()[0]
  print(f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}")
  hdr = f"{'case':<22}{'impl':<11}{'ms':>9}{'TFLOP/s':>9}{'temp MB':>10}  vs anchors"
  print(hdr + "\n" + "-" * len(hdr))
  for r in records:
    if "error" in r:
      print(f"{r['case']:<22}{r['impl']:<11} failed: {r['error'][:70]}")
      continue
    sp = " ".join(f"{k}: {v:.2f}x time" for k, v in r.get("speedup_vs", {}).items())
    mr = " ".join(f"{k}: 1/{v:.1f} memory" for k, v in r.get("memory_ratio_vs", {}).items())
    busy = f"  | GPU-busy {r['gpu_us'] / 1e3:.2f} ms" if r.get("gpu_us") else ""
    print(
      f"{r['case']:<22}{r['impl']:<11}{r['time_us'] / 1e3:>9.2f}{r['tflops']:>9.1f}"
      f"{r['temp_mb']:>10.0f}  {sp} {mr}{busy}"
    )
  if args.out:
    with open(args.out, "w") as f:
      json.dump(dict(device=device.device_kind, jax=jax.__version__, records=records), f, indent=1)
  return 0
