"""GPU time per call from CUPTI kernel records, for jax and PyTorch side by side.

The harness (jaxdnn.bench) times calls queued back to back from the host:
that includes whatever idle time the GPU spends between two calls. This
script records every kernel, memset and memcpy the GPU runs during N calls
(torch.profiler's CUPTI collector sees the whole process, jax's launches
included) and reports, per implementation:
  busy: summed GPU time of the records / N (what the op costs inside a larger
        jitted program, where nothing waits on the host);
  span: first start to last end / N (busy plus the gaps between calls);
  wall: the harness's host-timed figure (time_jax / time_torch).
The copy ceiling is measured the same way: PyTorch's device-to-device copy_
of the same bytes as the norm forward (read x, write y) and of 1 GiB.

  python3 benchmarks/kernel_timing.py [--norms] [--attention] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax
import jax.numpy as jnp
import numpy as np
import torch

import jaxdnn
from jaxdnn.bench.timing import gpu_records, jax_runner, time_jax, time_torch, torch_runner
from jaxdnn.norms.primitives import norm_backward, norm_forward

def _gpu_records(run, calls):
  """(busy, span) seconds per call of `run` (calls `calls` times, then waits)."""
  recs = gpu_records(run, calls)
  if not recs:
    return None, None, 0
  busy = sum(d for _, d in recs) / 1e6 / calls
  span = (max(t + d for t, d in recs) - min(t for t, _ in recs)) / 1e6 / calls
  return busy, span, len(recs) / calls


def time_gpu_jax(fn, *args, calls=30, repeats=3):
  run = jax_runner(fn, *args)
  samples = [_gpu_records(run, calls) for _ in range(repeats)]
  return _summary(samples, time_jax(fn, *args))


def time_gpu_torch(fn, calls=30, repeats=3):
  run = torch_runner(fn)
  samples = [_gpu_records(run, calls) for _ in range(repeats)]
  return _summary(samples, time_torch(fn))


def _summary(samples, wall):
  busy = [s[0] for s in samples if s[0] is not None]
  span = [s[1] for s in samples if s[1] is not None]
  return dict(busy_us=statistics.median(busy) * 1e6 if busy else None,
              span_us=statistics.median(span) * 1e6 if span else None,
              wall_us=wall * 1e6, records_per_call=samples[0][2])


def _row(table, case, name, t, nbytes=None, flops=None):
  r = dict(case=case, impl=name, **t)
  for key in ("busy", "span", "wall"):
    v = t.get(f"{key}_us")
    if v and nbytes:
      r[f"{key}_tbps"] = nbytes / v / 1e6
    if v and flops:
      r[f"{key}_tflops"] = flops / v / 1e6
  table.append(r)
  rate = lambda k: (f"{r.get(k + '_tbps', 0):6.2f} TB/s" if nbytes else f"{r.get(k + '_tflops', 0):6.0f} TF/s")
  busy = t["busy_us"] or float("nan")
  print(f"{case:28s} {name:18s} busy {busy:9.1f} us {rate('busy')}  span {t['span_us'] or float('nan'):9.1f}"
        f"  wall {t['wall_us']:9.1f} us {rate('wall')}  ({t['records_per_call']:.1f} records/call)",
        flush=True)
  return r


def norms(table):
  for rows, dim in ((32768, 4096), (8192, 8192)):
    k = jax.random.split(jax.random.key(rows + dim), 4)
    x = jax.random.normal(k[0], (rows, dim), jnp.bfloat16)
    dy = jax.random.normal(k[1], (rows, dim), jnp.bfloat16)
    s = 1.0 + 0.1 * jax.random.normal(k[2], (dim,), jnp.float32)
    b = 0.1 * jax.random.normal(k[3], (dim,), jnp.float32)
    nb_f, nb_b = 4 * rows * dim, 6 * rows * dim
    case = f"{rows}x{dim}"
    tx = torch.empty(rows * dim, dtype=torch.bfloat16, device="cuda").normal_()
    ty = torch.empty_like(tx)
    copy = _row(table, case + " copy", "torch copy_", time_gpu_torch(lambda: ty.copy_(tx)), nb_f)
    for kind in ("layer", "rms"):
      layer = kind == "layer"
      for impl in (None, "xla"):
        name = "jaxdnn" if impl is None else impl
        f = ((lambda x, s, b, impl=impl: jaxdnn.layer_norm(x, s, b, implementation=impl)) if layer
             else (lambda x, s, b, impl=impl: jaxdnn.rms_norm(x, s, implementation=impl)))
        r = _row(table, f"{kind} {case} fwd", name, time_gpu_jax(jax.jit(f), x, s, b), nb_f)
        r["busy_vs_copy"] = copy["busy_us"] / r["busy_us"] * 1.0 if r["busy_us"] else None

        def fwd_bwd(x, dy, f=f):
          y, vjp = jax.vjp(f, x, s, b)
          return (y,) + vjp(dy)
        _row(table, f"{kind} {case} fwd+bwd", name, time_gpu_jax(jax.jit(fwd_bwd), x, dy),
             nb_f + nb_b)
      outs = norm_forward.bind(*([x, s] + ([b] if layer else [])), kind=kind, epsilon=1e-5,
                               residual=False, implementation=None)
      stats = ([outs[1]] if layer else []) + [outs[-1]]
      bwd = jax.jit(lambda dy: norm_backward.bind(dy, x, s, *stats, kind=kind, residual=False,
                                                  implementation=None))
      _row(table, f"{kind} {case} bwd_kernel", "jaxdnn", time_gpu_jax(bwd, dy), nb_b)
    del tx, ty
  big = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda")
  big2 = torch.empty_like(big)
  _row(table, "1GiB copy", "torch copy_", time_gpu_torch(lambda: big2.copy_(big)), 2 << 30)
  del big, big2


def attention(table, seqs=(2048, 4096, 8192, 16384), dim=128, heads=16, impls=("jaxdnn", "cudnn"),
              causals=(False, True)):
  for seq in seqs:
    for causal in causals:
      batch = 16384 // seq
      k = jax.random.split(jax.random.key(seq), 4)
      q, kk, v, w = (jax.random.normal(x, (batch, seq, heads, dim), jnp.bfloat16) for x in k)
      flops = 4 * batch * heads * seq * seq * dim / (2 if causal else 1)
      case = f"attn d{dim} s{seq}{' causal' if causal else ''}"
      for name in impls:
        if name == "jaxdnn":
          att = lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, is_causal=causal)
        else:
          att = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal,
                                                             implementation="cudnn")
        _row(table, case + " fwd", name, time_gpu_jax(jax.jit(att), q, kk, v), flops=flops)

        def fb(q, k, v, att=att):
          o, vjp = jax.vjp(att, q, k, v)
          return vjp(w)
        _row(table, case + " fwd+bwd", name, time_gpu_jax(jax.jit(fb), q, kk, v), flops=3.5 * flops)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--norms", action="store_true")
  ap.add_argument("--attention", action="store_true")
  ap.add_argument("--seqs", default="2048,4096,8192,16384")
  ap.add_argument("--dim", type=int, default=128, help="head dim (16 heads, batch x seq = 16k)")
  ap.add_argument("--impls", default="jaxdnn,cudnn")
  ap.add_argument("--causal", default="0,1", help="0, 1 or 0,1")
  ap.add_argument("--out")
  a = ap.parse_args()
  table = []
  print("device:", jax.devices()[0].device_kind, flush=True)
  if a.norms:
    norms(table)
  if a.attention:
    attention(table, seqs=[int(x) for x in a.seqs.split(",")], dim=a.dim, impls=a.impls.split(","),
              causals=[bool(int(c)) for c in a.causal.split(",")])
  if a.out:
    with open(a.out, "w") as f:
      json.dump(dict(device=jax.devices()[0].device_kind, rows=table), f, indent=1)


if __name__ == "__main__":
  main()
