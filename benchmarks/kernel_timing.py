"""Attention A/Bs on GPU time per call from CUPTI records (one process per switch setting).

The harness (`python -m jaxdnn.bench attention --gpu-busy`) runs every anchor
over the whole grid; this script times a chosen few cases and implementations,
so that one device call can A/B several environment switches (they are read
once per process; see kt and kt_rounds in device_call.sh). Per implementation and case:
  busy: summed GPU time of the kernel, memset and memcpy records / N (what the
        op costs inside a larger jitted program, where nothing waits on the host);
  span: first start to last end / N (busy plus the gaps between calls);
  wall: the harness's host-timed figure (time_jax / time_torch).

  python3 benchmarks/kernel_timing.py --attention [--seqs 2048,4096] [--dim 128]
      [--impls jaxdnn,cudnn] [--causal 0,1] [--ops fwd,fwd+bwd] [--packed] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax
import jax.numpy as jnp

import jaxdnn
from jaxdnn.bench.timing import gpu_records, jax_runner, time_jax


def _gpu_records(run, calls):
  """(busy, span) seconds per call of `run` (calls `calls` times, then waits)."""
  recs = gpu_records(run, calls)
  if not recs:
    return None, None, 0
  busy = sum(r[1] for r in recs) / 1e6 / calls
  span = (max(r[0] + r[1] for r in recs) - min(r[0] for r in recs)) / 1e6 / calls
  return busy, span, len(recs) / calls


def time_gpu_jax(fn, *args, calls=30, repeats=3):
  run = jax_runner(fn, *args)
  samples = [_gpu_records(run, calls) for _ in range(repeats)]
  return _summary(samples, time_jax(fn, *args))


def _summary(samples, wall):
  busy = [s[0] for s in samples if s[0] is not None]
  span = [s[1] for s in samples if s[1] is not None]
  return dict(
    busy_us=statistics.median(busy) * 1e6 if busy else None,
    span_us=statistics.median(span) * 1e6 if span else None,
    wall_us=wall * 1e6,
    records_per_call=samples[0][2],
  )


def _row(table, case, name, t, flops):
  r = dict(case=case, impl=name, **t)
  for key in ("busy", "span", "wall"):
    if t.get(f"{key}_us"):
      r[f"{key}_tflops"] = flops / t[f"{key}_us"] / 1e6
  table.append(r)
  busy = t["busy_us"] or float("nan")
  print(
    f"{case:28s} {name:18s} busy {busy:9.1f} us {r.get('busy_tflops', 0):6.0f} TF/s"
    f"  span {t['span_us'] or float('nan'):9.1f}  wall {t['wall_us']:9.1f} us"
    f" {r.get('wall_tflops', 0):6.0f} TF/s  ({t['records_per_call']:.1f} records/call)",
    flush=True,
  )
  return r


def attention(
  table,
  seqs=(2048, 4096, 8192, 16384),
  dim=128,
  heads=16,
  impls=("jaxdnn", "cudnn"),
  causals=(False, True),
  ops=("fwd", "fwd+bwd"),
):
  for seq in seqs:
    for causal in causals:
      batch = max(1, 16384 // seq)  # one sequence past 16k tokens
      k = jax.random.split(jax.random.key(seq), 4)
      q, kk, v, w = (jax.random.normal(x, (batch, seq, heads, dim), jnp.bfloat16) for x in k)
      flops = 4 * batch * heads * seq * seq * dim / (2 if causal else 1)
      case = f"attn d{dim} s{seq}{' causal' if causal else ''}"
      for name in impls:
        if name == "jaxdnn":
          att = lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, is_causal=causal)
        else:
          att = lambda q, k, v: jax.nn.dot_product_attention(
            q, k, v, is_causal=causal, implementation="cudnn"
          )
        if "fwd" in ops:
          _row(table, case + " fwd", name, time_gpu_jax(jax.jit(att), q, kk, v), flops)
        if "fwd+bwd" not in ops:
          continue

        def fb(q, k, v, att=att):
          o, vjp = jax.vjp(att, q, k, v)
          return vjp(w)

        _row(table, case + " fwd+bwd", name, time_gpu_jax(jax.jit(fb), q, kk, v), 3.5 * flops)


def packed(table, dim=128, heads=16):
  """jaxdnn on the harness's packed documents (b2 s8192, causal, segment ids)."""
  from jaxdnn.attention.bench import packed_document_ids

  ids, flops = packed_document_ids(dim)
  seg = jnp.asarray(ids)
  batch, seq = ids.shape
  k = jax.random.split(jax.random.key(7), 4)
  q, kk, v, w = (jax.random.normal(x, (batch, seq, heads, dim), jnp.bfloat16) for x in k)
  att = lambda q, k, v: jaxdnn.dot_product_attention(
    q, k, v, is_causal=True, query_segment_ids=seg, key_value_segment_ids=seg
  )
  case = f"attn packed d{dim} b{batch}s{seq}"
  _row(table, case + " fwd", "jaxdnn", time_gpu_jax(jax.jit(att), q, kk, v), flops)

  def fb(q, k, v):
    o, vjp = jax.vjp(att, q, k, v)
    return vjp(w)

  _row(table, case + " fwd+bwd", "jaxdnn", time_gpu_jax(jax.jit(fb), q, kk, v), 3.5 * flops)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--attention", action="store_true")
  ap.add_argument("--seqs", default="2048,4096,8192,16384")
  ap.add_argument("--dim", type=int, default=128, help="head dim (16 heads, batch x seq = 16k)")
  ap.add_argument("--impls", default="jaxdnn,cudnn")
  ap.add_argument("--causal", default="0,1", help="0, 1 or 0,1")
  ap.add_argument("--ops", default="fwd,fwd+bwd", help="fwd, fwd+bwd or both")
  ap.add_argument("--packed", action="store_true", help="also jaxdnn on the packed documents")
  ap.add_argument("--out")
  a = ap.parse_args()
  table = []
  print("device:", jax.devices()[0].device_kind, flush=True)
  if a.attention:
    attention(
      table,
      seqs=[int(x) for x in a.seqs.split(",")],
      dim=a.dim,
      impls=a.impls.split(","),
      causals=[bool(int(c)) for c in a.causal.split(",")],
      ops=a.ops.split(","),
    )
  if a.packed:
    packed(table, dim=a.dim)
  if a.out:
    with open(a.out, "w") as f:
      json.dump(dict(device=jax.devices()[0].device_kind, rows=table), f, indent=1)


if __name__ == "__main__":
  main()
