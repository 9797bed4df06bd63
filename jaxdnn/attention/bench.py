"""Attention benchmark: jaxdnn against cuDNN and XLA (jax.nn.dot_product_attention),
PyTorch SDPA and tokamax when present, side by side in one process.

  python -m jaxdnn.bench attention [--quick] [--dims 64,128,256] [--seqs 512,...] [--out f.json]

Grid: batch x seq = 16k tokens, 16 heads, head dims 64/128/256, causal and
not, forward and forward+backward; plus packed documents and decode.
FLOPs: forward 4*B*H*Sq*Sk*D, halved when causal; backward 2.5x forward.
Packed documents count only the FLOPs inside their documents, and also (the
issue's measure) those of the 128 x 128 blocks that hold an allowed pair.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdnn  # noqa: E402
from jaxdnn.bench import timing  # noqa: E402
from jaxdnn.bench.ratios import add_ratios  # noqa: E402

TOKENS = 16384
HEADS = 16
SEQS = (512, 1024, 2048, 4096, 8192, 16384)
DIMS = (64, 128, 256)
XLA_MAX_SEQ = 4096  # XLA materializes [B, H, S, S] float32 logits


def _tokamax():
  try:
    import tokamax

    return tokamax
  except Exception:  # noqa: BLE001 - not installed: the anchor is skipped
    return None


def _impls(with_torch):
  impls = {
    "jaxdnn": lambda q, k, v, **kw: jaxdnn.dot_product_attention(q, k, v, **kw),
    "cudnn": lambda q, k, v, **kw: jax.nn.dot_product_attention(
      q, k, v, implementation="cudnn", **kw
    ),
    "xla": lambda q, k, v, **kw: jax.nn.dot_product_attention(q, k, v, implementation="xla", **kw),
  }
  tk = _tokamax()
  if tk is not None:
    impls["tokamax"] = lambda q, k, v, **kw: tk.dot_product_attention(q, k, v, **kw)
  return impls


def _fwd_and_fwdbwd(f, kw):
  # Arrays among the keyword arguments (segment ids, masks) are passed to the
  # jitted functions as arguments, as a training step passes them, not closed
  # over as constants: a closed-over array cost the packed-document forward
  # ~80 us of host time per call on an H200 (benchmarks/trace_packed_host.py).
  arrays = {n: x for n, x in kw.items() if isinstance(x, jax.Array)}
  static = {n: x for n, x in kw.items() if n not in arrays}

  fwd = jax.jit(lambda q, k, v, arrays: f(q, k, v, **static, **arrays))

  def loss(q, k, v, arrays):
    return jnp.sum(f(q, k, v, **static, **arrays).astype(jnp.float32))

  grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
  return (lambda q, k, v: fwd(q, k, v, arrays)), (lambda q, k, v: grad(q, k, v, arrays))


def _record(name, case, direction, impl, seconds, flops, busy=None, **extra):
  r = dict(
    op=name,
    case=case,
    direction=direction,
    impl=impl,
    time_us=seconds * 1e6,
    tflops=flops / seconds / 1e12,
    **extra,
  )
  if busy:  # GPU-busy time (timing.MODE["gpu_busy"])
    r.update(gpu_us=busy * 1e6, gpu_tflops=flops / busy / 1e12)
  return r


def _time_pair(impl_name, f, kw, q, k, v, flops_fwd, case, name, records, with_bwd=True):
  try:
    fwd, fwdbwd = _fwd_and_fwdbwd(f, kw)
    t_f = timing.time_jax(fwd, q, k, v, warmup=2, repeats=7)  # samples span >= 3 ms
    b_f = timing.busy_jax(fwd, q, k, v, calls=10)
    records.append(_record(name, case, "fwd", impl_name, t_f, flops_fwd, b_f))
    if with_bwd:
      t_fb = timing.time_jax(fwdbwd, q, k, v, warmup=2, repeats=7, calls=3)
      b_fb = timing.busy_jax(fwdbwd, q, k, v, calls=5)
      records.append(_record(name, case, "fwd+bwd", impl_name, t_fb, 3.5 * flops_fwd, b_fb))
  except Exception as e:  # noqa: BLE001 - an anchor that refuses a case is recorded, not fatal
    records.append(
      dict(
        op=name,
        case=case,
        direction="fwd",
        impl=impl_name,
        error=f"{type(e).__name__}: {str(e).splitlines()[0][:160]}",
      )
    )


def torch_qkv(q, k, v):
  """q, k, v as PyTorch's SDPA takes them: bf16 on the GPU, [batch, heads, seq, dim]."""
  import torch

  return tuple(
    torch.from_numpy(np.asarray(x.astype(jnp.float32)))
    .to("cuda", torch.bfloat16)
    .transpose(1, 2)
    .contiguous()
    for x in (q, k, v)
  )


def _torch_rows(q, k, v, causal, flops_fwd, case, name, records):
  try:
    import torch
    import torch.nn.functional as F
  except Exception:  # noqa: BLE001
    return
  tq, tk, tv = torch_qkv(q, k, v)
  try:
    fwd = lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    t_f = timing.time_torch(fwd, warmup=2, repeats=7, calls=5)
    b_f = timing.busy_torch(fwd, calls=10)
    records.append(_record(name, case, "fwd", "torch", t_f, flops_fwd, b_f))
    tq.requires_grad_(True), tk.requires_grad_(True), tv.requires_grad_(True)

    def fb():
      o = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
      o.sum().backward()

    t_fb = timing.time_torch(fb, warmup=2, repeats=7, calls=3)
    b_fb = timing.busy_torch(fb, calls=5)
    records.append(_record(name, case, "fwd+bwd", "torch", t_fb, 3.5 * flops_fwd, b_fb))
  except Exception as e:  # noqa: BLE001
    records.append(dict(op=name, case=case, direction="fwd", impl="torch", error=str(e)[:160]))
  finally:
    del tq, tk, tv
    torch.cuda.empty_cache()


def dense_grid(seqs, dims, causals, with_torch, records, tokens=TOKENS):
  impls = _impls(with_torch)
  for dim in dims:
    for seq in seqs:
      batch = max(1, tokens // seq)
      keys = jax.random.split(jax.random.PRNGKey(seq * dim), 3)
      q, k, v = (jax.random.normal(kk, (batch, seq, HEADS, dim), jnp.bfloat16) for kk in keys)
      for causal in causals:
        flops = 4 * batch * HEADS * seq * seq * dim / (2 if causal else 1)
        case = f"b{batch}s{seq}d{dim}" + ("c" if causal else "")
        for name, f in impls.items():
          if name == "xla" and seq > XLA_MAX_SEQ:
            continue
          _time_pair(name, f, dict(is_causal=causal), q, k, v, flops, case, "attention", records)
        if with_torch:
          _torch_rows(q, k, v, causal, flops, case, "attention", records)
        _print_case(records, case)


def packed_document_ids(dim, seq=8192, batch=2, mean_doc=1024):
  """The benchmark's packed documents (seeded): segment ids [batch, seq] and
  the causal forward FLOPs inside documents."""
  rng = np.random.default_rng(0)
  ids = np.zeros((batch, seq), np.int32)
  flops = 0.0
  for b in range(batch):
    pos, doc = 0, 0
    while pos < seq:
      n = int(min(seq - pos, max(16, rng.exponential(mean_doc))))
      ids[b, pos : pos + n] = doc
      flops += 4 * HEADS * n * n * dim / 2
      pos, doc = pos + n, doc + 1
  return ids, flops


def packed_documents(dim, with_torch, records, seq=8192, batch=2, mean_doc=1024):
  """Causal attention over packed documents; FLOPs only inside documents."""
  ids, flops = packed_document_ids(dim, seq, batch, mean_doc)
  keys = jax.random.split(jax.random.PRNGKey(7), 3)
  q, k, v = (jax.random.normal(kk, (batch, seq, HEADS, dim), jnp.bfloat16) for kk in keys)
  seg = jnp.asarray(ids)
  case = f"packed b{batch}s{seq}d{dim}"
  kw = dict(is_causal=True, query_segment_ids=seg, key_value_segment_ids=seg)
  _time_pair(
    "jaxdnn",
    lambda q, k, v, **kw: jaxdnn.dot_product_attention(q, k, v, **kw),
    kw,
    q,
    k,
    v,
    flops,
    case,
    "packed",
    records,
  )
  # cuDNN through jax has no segment ids: the same documents as a dense bool mask.
  mask = seg[:, None, :, None] == seg[:, None, None, :]
  _time_pair(
    "cudnn",
    lambda q, k, v, **kw: jax.nn.dot_product_attention(q, k, v, implementation="cudnn", **kw),
    dict(is_causal=True, mask=mask),
    q,
    k,
    v,
    flops,
    case,
    "packed",
    records,
  )
  # The measure: FLOPs of the 128 x 128 blocks with at least one
  # allowed pair (causal, same document), next to dense causal counted alike.
  block_flops, dense_block_flops = _block_flops(ids, dim), _block_flops(np.zeros_like(ids), dim)
  for r in records:
    if r.get("case") == case and "time_us" in r:
      scale = 3.5 if r["direction"] == "fwd+bwd" else 1.0
      r["tflops_blocks"] = scale * block_flops / r["time_us"] / 1e6
      if r.get("gpu_us"):
        r["gpu_tflops_blocks"] = scale * block_flops / r["gpu_us"] / 1e6
      r["block_flops_fwd"] = block_flops
      r["dense_causal_block_flops_fwd"] = dense_block_flops
  _print_case(records, case)
  for r in records:
    if r.get("case") == case and "tflops_blocks" in r:
      busy = f" (GPU-busy {r['gpu_tflops_blocks']:.1f})" if r.get("gpu_tflops_blocks") else ""
      print(
        f"  {case:<22}{r['direction']:<9}{r['impl']:<9} counting unmasked 128x128 blocks:"
        f"{r['tflops_blocks']:>8.1f} TFLOP/s{busy}",
        flush=True,
      )


def _block_flops(ids, dim, block=128):
  """Forward FLOPs of the (block x block) tiles of causal attention over the
  documents `ids` [batch, seq] that hold at least one allowed pair."""
  batch, seq = ids.shape
  nb = -(-seq // block)
  total = 0
  for b in range(batch):
    pad = np.full(nb * block, -1, np.int64)
    pad[:seq] = ids[b]
    tiles = pad.reshape(nb, block)
    lo, hi = tiles.min(axis=1), tiles.max(axis=1)
    for i in range(nb):
      for j in range(i + 1):  # causal: key tiles at or below the diagonal
        if lo[j] <= hi[i] and lo[i] <= hi[j] and _tiles_share(tiles[i], tiles[j], i, j, block):
          total += 1
  return 4.0 * HEADS * block * block * dim * total


def _tiles_share(qt, kt, i, j, block):
  """Whether some query of tile i may attend some key of tile j (causal, same id)."""
  rows = np.arange(block)[:, None] + i * block
  cols = np.arange(block)[None, :] + j * block
  return bool(np.any((qt[:, None] == kt[None, :]) & (qt[:, None] >= 0) & (cols <= rows)))


def decode(dim, records, kv_len=16384, batch=16):
  """One new query token per sequence over a cached key/value of kv_len.

  Every implementation runs non-causal: the one query sees the whole cache.
  (With is_causal=True, jax.nn aligns the mask top-left, so its one query
  would see only key 0, while jaxdnn aligns it bottom-right, the decode
  meaning; timing the two would compare different work.) Memory-bound:
  reported as TB/s over the key/value bytes, next to TFLOP/s."""
  keys = jax.random.split(jax.random.PRNGKey(11), 3)
  q = jax.random.normal(keys[0], (batch, 1, HEADS, dim), jnp.bfloat16)
  k, v = (jax.random.normal(kk, (batch, kv_len, HEADS, dim), jnp.bfloat16) for kk in keys[1:])
  flops = 4 * batch * HEADS * kv_len * dim
  nbytes = 2 * batch * kv_len * HEADS * dim * 2
  case = f"decode b{batch}kv{kv_len}d{dim}"
  for name, f in _impls(False).items():
    _time_pair(
      name, f, dict(is_causal=False), q, k, v, flops, case, "decode", records, with_bwd=False
    )
  for r in records:
    if r.get("case") == case and "time_us" in r:
      r["tbps"] = nbytes / r["time_us"] / 1e6
      if r.get("gpu_us"):
        r["gpu_tbps"] = nbytes / r["gpu_us"] / 1e6
  _print_case(records, case)


def _print_case(records, case):
  rows = [r for r in records if r.get("case") == case]
  for r in rows:
    if "error" in r:
      print(f"  {case:<22}{r['impl']:<9} failed: {r['error'][:90]}", flush=True)
    else:
      tbps = f"{r['tbps']:>7.2f} TB/s" if "tbps" in r else ""
      busy = (
        f"   GPU-busy {r['gpu_us']:>10.1f} us{r['gpu_tflops']:>8.1f} TFLOP/s"
        if r.get("gpu_us")
        else ""
      )
      print(
        f"  {case:<22}{r['direction']:<9}{r['impl']:<9}{r['time_us']:>10.1f} us"
        f"{r['tflops']:>8.1f} TFLOP/s{tbps}{busy}",
        flush=True,
      )


def summary(records, dim=128, seq_min=2048):
  """Geometric means of jaxdnn / cuDNN TFLOP/s over the target grid (seq >= 2k, head dim 128)."""
  out = {}
  for key, prefix in (("speedup_vs", ""), ("gpu_speedup_vs", "gpu-busy ")):
    for direction in ("fwd", "fwd+bwd"):
      ratios = [
        r[key]["cudnn"]
        for r in records
        if r.get("impl") == "jaxdnn"
        and r["op"] == "attention"
        and r["direction"] == direction
        and "cudnn" in r.get(key, {})
        and re.fullmatch(rf"b\d+s\d+d{dim}c?", r["case"])  # the dense grid's cases only
        and int(r["case"].split("s")[1].split("d")[0]) >= seq_min
      ]
      if ratios:
        out[prefix + direction] = dict(
          geomean=math.exp(sum(map(math.log, ratios)) / len(ratios)),
          min=min(ratios),
          cases=len(ratios),
        )
  return out


def matmul_tflops(n=8192):
  """The measured bf16 matmul rate: the compute floor's denominator."""
  a = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.bfloat16)
  f = jax.jit(lambda a: a @ a)
  return 2 * n**3 / timing.time_jax(f, a, warmup=2, repeats=7, calls=5) / 1e12


def main(argv=None):
  ap = argparse.ArgumentParser(prog="python -m jaxdnn.bench attention")
  ap.add_argument("--quick", action="store_true", help="one small case per head dim")
  ap.add_argument("--dims", default=",".join(map(str, DIMS)))
  ap.add_argument("--seqs", default=",".join(map(str, SEQS)))
  ap.add_argument("--no-torch", action="store_true")
  ap.add_argument(
    "--only",
    default="dense,packed,decode",
    help="comma-separated parts: dense (the grid), packed, decode, extras (issue 24: bias,"
    " sinks, MLA; not in the default), bias (issue 24's bias table over --seqs from 1024:"
    " [1, H, T, T] and [B, H, T, T], causal and not; not in the default), mla (issue 24's"
    " MLA table over --seqs and --mla-dims, batch x seq = 16k tokens; not in the default), mask"
    " (boolean masks [B, 1, T, T] and [B, 1, 1, T] over --seqs from 1024, causal and not,"
    " no mask gradient; not in the default)",
  )
  ap.add_argument(
    "--mla-dims",
    default="192/128",
    help="comma-separated query-key/value head dims of the mla part, e.g. 192/128,128/64",
  )
  ap.add_argument(
    "--gpu-busy",
    action="store_true",
    help="also record GPU-busy time per call from CUPTI (needs PyTorch)",
  )
  ap.add_argument("--out")
  args = ap.parse_args(argv)
  timing.MODE["gpu_busy"] = args.gpu_busy
  dims = [int(d) for d in args.dims.split(",")]
  seqs = [256] if args.quick else [int(s) for s in args.seqs.split(",")]
  with_torch = not args.no_torch and jax.default_backend() == "gpu"
  device = jax.devices()[0]
  print(
    f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}", flush=True
  )
  records = []
  mm = matmul_tflops(512 if args.quick else 8192)
  print(f"bf16 matmul (XLA/cuBLAS): {mm:.1f} TFLOP/s", flush=True)
  parts = set(args.only.split(","))
  if "dense" in parts:
    dense_grid(seqs, dims, (False, True), with_torch, records, tokens=512 if args.quick else TOKENS)
  if not args.quick and "packed" in parts:
    packed_documents(128, with_torch, records)
  if not args.quick and "decode" in parts:
    decode(128, records)
    decode(128, records, batch=1)  # one sequence: the case a split over kv_len is for
  if "extras" in parts:
    from jaxdnn.attention.bench_extras import extras

    extras(records, with_torch, seq=256 if args.quick else 4096, print_case=_print_case)
  if "bias" in parts:
    from jaxdnn.attention.bench_extras import bias_grid

    bias_seqs = [256] if args.quick else [s for s in seqs if s >= 1024]
    bias_grid(records, seqs=bias_seqs, print_case=_print_case)
  if "mask" in parts:
    from jaxdnn.attention.bench_extras import mask_grid

    mask_seqs = [256] if args.quick else [s for s in seqs if s >= 1024]
    mask_grid(records, seqs=mask_seqs, print_case=_print_case)
  if "mla" in parts:
    from jaxdnn.attention.bench_extras import mla_grid

    mla_dims = [tuple(int(x) for x in d.split("/")) for d in args.mla_dims.split(",")]
    mla_grid(
      records,
      with_torch,
      seqs=[256] if args.quick else seqs,
      print_case=_print_case,
      dims=mla_dims,
    )
  add_ratios(records)
  summ = summary(records)
  print("jaxdnn vs cuDNN (head dim 128, seq >= 2k):", json.dumps(summ))
  if args.out:
    with open(args.out, "w") as f:
      json.dump(
        dict(
          device=device.device_kind,
          backend=jax.default_backend(),
          jax=jax.__version__,
          matmul_tflops=mm,
          summary=summ,
          records=records,
        ),
        f,
        indent=1,
      )
  return 0


if __name__ == "__main__":
  sys.exit(main())
