"""paged_attention's fuzz table (tests/fuzz): invalid and edge-case
arguments, and a float64 oracle that walks each sequence's block table
(context lengths clipped to what the table holds, block indices clipped to
the pool: the op's gather)."""

import math

import jax.numpy as jnp
import numpy as np
from fuzz_base import FuzzOp, rand

import jaxdnn


def paged_oracle(
  q, kc, vc, tables, lengths, *, scale=None, softcap=None, local_window_size=None, sinks=None
):
  q, kc, vc = (np.asarray(x, np.float64) for x in (q, kc, vc))
  tables = np.clip(np.asarray(tables).astype(np.int64), 0, kc.shape[0] - 1)
  batch, q_len, heads, dim = q.shape
  span = tables.shape[1] * kc.shape[1]
  group = heads // kc.shape[2]
  scale = 1 / math.sqrt(dim) if scale is None else float(scale)
  left = None
  if local_window_size is not None:
    lw = local_window_size
    left = lw[0] if isinstance(lw, tuple) else lw
  out = np.zeros(q.shape[:3] + (vc.shape[3],))
  for b in range(batch):
    n = int(np.clip(int(np.asarray(lengths)[b]), 0, span))
    k = np.concatenate([kc[t] for t in tables[b]])[:n]
    v = np.concatenate([vc[t] for t in tables[b]])[:n]
    for i in range(q_len):
      # A context shorter than the query (its own tokens not all in the
      # cache) aligns the queries top-left: dot_product_attention's rule.
      pos = max(n - q_len, 0) + i
      keys = np.arange(n)
      ok = keys <= pos
      if left is not None:
        ok &= keys >= pos - left
      if not ok.any():
        continue
      for h in range(heads):
        s = k[:, h // group] @ q[b, i, h] * scale
        if softcap is not None:
          s = float(softcap) * np.tanh(s / float(softcap))
        s = np.where(ok, s, -np.inf)
        m = s.max()
        sink = None if sinks is None else float(np.asarray(sinks, np.float64)[h])
        if sink is not None:
          m = max(m, sink)
        p = np.exp(s - m)
        denom = p.sum() + (0.0 if sink is None else math.exp(sink - m))
        out[b, i, h] = (p / denom) @ v[:, h // group]
  return out


def paged_cases(dtype=np.float32):
  rng = np.random.default_rng(3)
  q = rand((2, 3, 4, 8)).astype(dtype)
  kc, vc = rand((6, 4, 2, 8)).astype(dtype), rand((6, 4, 2, 8)).astype(dtype)
  tables = jnp.asarray(rng.permutation(6)[:6].reshape(2, 3).astype(np.int32))
  lengths = jnp.array([5, 12], jnp.int32)
  base = dict(q=q, kc=kc, vc=vc, tables=tables, lengths=lengths)
  cases = []

  def add(name, arg, **changes):
    cases.append((name, arg, base | changes))

  for role, key, x in (("query", "q", q), ("key_cache", "kc", kc), ("value_cache", "vc", vc)):
    for bad, label in ((None, "none"), ("s", "str")):
      add(f"{role} {label}", role, **{key: bad})
    add(f"{role} rank 3", role, **{key: x[0]})
    add(f"{role} int32", role, **{key: x.astype(jnp.int32)})
    add(f"{role} nan", role, **{key: x.at[1, 2].set(jnp.nan)})
  add("key_cache kv_heads 3", "key_cache", kc=rand((6, 4, 3, 8)).astype(dtype))
  add("value_cache blocks differ", "value_cache", vc=rand((5, 4, 2, 8)).astype(dtype))
  add("value head_dim 16", "value_cache", vc=rand((6, 4, 2, 16)).astype(dtype))
  add("block_tables float", "block_tables", tables=tables * 1.0)
  add("block_tables rank 1", "block_tables", tables=tables[0])
  add("block_tables batch 3", "block_tables", tables=jnp.concatenate([tables, tables[:1]]))
  add("block_tables out of range", "block_tables", tables=tables.at[1, 0].set(99))
  add("block_tables negative", "block_tables", tables=tables.at[0, 0].set(-4))
  add("context_lengths float", "context_lengths", lengths=lengths * 1.0)
  add("context_lengths shape", "context_lengths", lengths=jnp.array([5, 12, 3]))
  add("context_lengths zero", "context_lengths", lengths=jnp.array([0, 12], jnp.int32))
  add("context_lengths negative", "context_lengths", lengths=jnp.array([-2, 12], jnp.int32))
  add("context_lengths past the table", "context_lengths", lengths=jnp.array([5, 40], jnp.int32))
  add("context_lengths shorter than q_len", "context_lengths", lengths=jnp.array([2, 1], jnp.int32))
  add("context_lengths int64", "context_lengths", lengths=jnp.array([5, 12], jnp.int64))
  add("q_len past the table", "q_len", q=rand((2, 13, 4, 8)).astype(dtype))
  for sc, label in (
    (0.0, "0"),
    (-1.0, "negative"),
    (math.nan, "nan"),
    (math.inf, "inf"),
    ("a", "str"),
  ):
    add(f"scale {label}", "scale", scale=sc)
  add("scale 0.3", "scale", scale=0.3)
  for c, label in ((math.inf, "inf"), (0.0, "0"), (math.nan, "nan"), (4.0, "valid")):
    add(f"softcap {label}", "softcap", softcap=c)
  for w, label in (((-1, 0), "negative side"), ((3, 0), "left 3"), ("a", "str"), (2, "int")):
    add(f"window {label}", "local_window_size", local_window_size=w)
  add("sinks valid", "sinks", sinks=jnp.array([0.5, -1.0, 2.0, 0.0], jnp.float32))
  add("sinks wrong shape", "sinks", sinks=jnp.zeros((3,), jnp.float32))
  add("implementation bad", "implementation", implementation="triton")
  return cases


FUZZ_OPS = {
  "paged_attention": FuzzOp(
    # The CUDA kernels take 16-bit inputs: its table runs in bfloat16.
    cases=lambda impl: paged_cases(jnp.bfloat16 if impl == "cuda" else np.float32),
    inputs=("q", "kc", "vc", "tables", "lengths"),
    fn=jaxdnn.paged_attention,
    oracle=paged_oracle,
    aliases={"q": "query", "q_len": "q_len"},
  ),
}
