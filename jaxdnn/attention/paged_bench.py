"""python -m jaxdnn.bench paged: paged-KV decode (issue 24) against the
contiguous-cache decode at equal context, side by side in one process.

Rows per case (one query token a sequence, GQA 32 query heads over 4 kv
heads, head dim 128, bfloat16, every sequence at the same context):
  paged      jaxdnn.paged_attention: the pool read in place by the kernel
  gathered   the same call through the gathered form (the blocks copied to a
             contiguous array first: what ran before the in-place kernels)
  contiguous jaxdnn.dot_product_attention on a contiguous cache (split-KV decode)
  cudnn      jax.nn.dot_product_attention(implementation="cudnn") on it
Bytes counted: the keys and values of the contexts, read once. Ratios are
against the copy bandwidth measured in the same run and the contiguous row.
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn
from jaxdnn.attention import paged
from jaxdnn.bench import ceilings, timing

HEADS, KV_HEADS, DIM = 32, 4, 128
# (batch, context): 1-64 sequences, 1k-128k tokens, at most 2M tokens a case.
CASES = [(1, 1024), (1, 16384), (1, 131072), (8, 16384), (8, 131072), (64, 1024), (64, 16384)]
BLOCKS = (16, 64)


def _case(batch, context, block, key):
  k1, k2, k3, k4 = jax.random.split(key, 4)
  blocks = context // block
  pool = batch * blocks
  q = jax.random.normal(k1, (batch, 1, HEADS, DIM), jnp.bfloat16)
  kc = jax.random.normal(k2, (pool, block, KV_HEADS, DIM), jnp.bfloat16)
  vc = jax.random.normal(k3, (pool, block, KV_HEADS, DIM), jnp.bfloat16)
  # A shuffled pool: each sequence's blocks are scattered, as a serving cache's are.
  tables = jax.random.permutation(k4, pool).reshape(batch, blocks).astype(jnp.int32)
  lengths = jnp.full((batch,), context, jnp.int32)
  return q, kc, vc, tables, lengths


def _rows(batch, context, block, records, busy):
  q, kc, vc, tables, lengths = _case(batch, context, block, jax.random.PRNGKey(batch + context))
  cfg = paged._Config(None, None, None, None)
  k = jnp.take(kc, tables, axis=0).reshape(batch, context, KV_HEADS, DIM)
  v = jnp.take(vc, tables, axis=0).reshape(batch, context, KV_HEADS, DIM)
  fns = {
    "paged": (jax.jit(jaxdnn.paged_attention), (q, kc, vc, tables, lengths)),
    "gathered": (
      jax.jit(lambda *a: paged._gathered(cfg, *a, None)),
      (q, kc, vc, tables, lengths),
    ),
    "contiguous": (
      jax.jit(lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, is_causal=True)),
      (q, k, v),
    ),
    "cudnn": (
      jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="cudnn")),
      (q, k, v),
    ),
  }
  nbytes = 2 * batch * context * KV_HEADS * DIM * 2
  case = f"b{batch} ctx{context} block{block}"
  out = {}
  for name, (f, args) in fns.items():
    try:
      t = timing.time_jax(f, *args)
      b = timing.busy_jax(f, *args) if busy else None
    except Exception as e:  # noqa: BLE001 - an anchor that cannot run this case
      print(f"{case:28s} {name:11s} failed: {type(e).__name__}: {str(e)[:120]}")
      continue
    rec = dict(case=case, impl=name, time_us=t * 1e6, tbps=nbytes / t / 1e12)
    if b:
      rec.update(gpu_us=b * 1e6, gpu_tbps=nbytes / b / 1e12)
    out[name] = rec
    records.append(rec)
  base = out.get("contiguous")
  for name, rec in out.items():
    key = "gpu_us" if "gpu_us" in rec else "time_us"
    vs = f"vs contiguous {base[key] / rec[key]:.2f}x" if base and key in base else ""
    busy_txt = (
      f"{rec['gpu_us']:9.1f} us busy {rec['gpu_tbps']:5.2f} TB/s" if "gpu_us" in rec else ""
    )
    print(
      f"{case:28s} {name:11s} {rec['time_us']:9.1f} us {rec['tbps']:5.2f} TB/s  {busy_txt}  {vs}",
      flush=True,
    )


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  ap = argparse.ArgumentParser(prog="python -m jaxdnn.bench paged")
  ap.add_argument("--out", help="write the records as JSON here")
  ap.add_argument("--gpu-busy", action="store_true", help="also GPU-busy time (CUPTI)")
  ap.add_argument("--quick", action="store_true", help="one small case (a CPU smoke run)")
  args = ap.parse_args(argv)
  timing.MODE["gpu_busy"] = args.gpu_busy
  print(f"device: {jax.devices()[0].device_kind}, jax {jax.__version__}")
  copy = ceilings.measure(quick=args.quick)
  print("copy bandwidth (TB/s): " + ", ".join(f"{k} {v / 1e12:.2f}" for k, v in copy.items() if v))
  records = [dict(copy_bandwidth={k: v for k, v in copy.items() if v})]
  cases = [(2, 256)] if args.quick else CASES
  for block in (16,) if args.quick else BLOCKS:
    for batch, context in cases:
      _rows(batch, context, block, records, args.gpu_busy)
  ceiling = copy.get("ceiling") or np.nan
  paged_rows = [r for r in records if r.get("impl") == "paged"]
  if paged_rows and np.isfinite(ceiling):
    key = "gpu_tbps" if args.gpu_busy else "tbps"
    share = [r.get(key, r["tbps"]) * 1e12 / ceiling for r in paged_rows]
    print(f"paged decode: {min(share):.0%}-{max(share):.0%} of the copy bandwidth ({key})")
  if args.out:
    with open(args.out, "w") as f:
      json.dump(records, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
