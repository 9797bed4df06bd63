"""Runs a table of invalid and edge-case arguments through one public op and
one implementation, one case at a time, printing a JSON line per case:

  python fuzz_runner.py OP IMPLEMENTATION   (OP: layer_norm, rms_norm, dot_product_attention)

Outcome per case: "error" (raised, and the message names the argument),
"match" (returned a result equal to a float64 oracle, NaN where it has NaN),
"unnamed" (raised without naming the argument) or "wrong" (a result that
differs from the oracle). A "start" line precedes every case so that the
parent can name the case a crash happened in. Run with x64 enabled, so int64
and float64 inputs are real.
"""

from __future__ import annotations

import json
import math
import sys

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdnn  # noqa: E402

RNG = np.random.default_rng(0)


def rand(shape, dtype=np.float32, lo=-1.0, hi=1.0):
  x = RNG.uniform(lo, hi, size=shape)
  x[x == 0] = 0.5  # never zeros
  return jnp.asarray(x.astype(dtype))


# ---------------------------------------------------------------- oracles (float64, numpy)


def norm_oracle(
  kind, x, scale=None, bias=None, epsilon=1e-5, residual=None, zero_centered_scale=False
):
  z = np.asarray(x, np.float64) + (0 if residual is None else np.asarray(residual, np.float64))
  if kind == "layer":
    y = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + float(epsilon))
  else:
    y = z / np.sqrt((z * z).mean(-1, keepdims=True) + float(epsilon))
  if scale is not None:
    s = np.asarray(scale, np.float64)
    y = y * (1 + s if zero_centered_scale else s)
  if bias is not None:
    y = y + np.asarray(bias, np.float64)
  return y


def softmax_oracle(log, x, axis=-1, where=None):
  z = np.asarray(x, np.float64)
  ax = tuple(range(z.ndim)) if axis is None else (tuple(axis) if isinstance(axis, list) else axis)
  w = np.ones(z.shape, bool) if where is None else np.broadcast_to(np.asarray(where), z.shape)
  with np.errstate(all="ignore"):
    m = np.max(np.where(w, z, -np.inf), axis=ax, keepdims=True, initial=-np.inf)
    shifted = np.where(w, z, -np.inf) - m
    e = np.where(w, np.exp(shifted), 0.0)
    s = e.sum(axis=ax, keepdims=True)
    if log:
      return np.where(w, shifted - np.log(s), -np.inf)
    return np.where(w, e / s, 0.0)


def attention_oracle(
  q,
  k,
  v,
  bias=None,
  mask=None,
  *,
  scale=None,
  is_causal=False,
  query_seq_lengths=None,
  key_value_seq_lengths=None,
  local_window_size=None,
  query_segment_ids=None,
  key_value_segment_ids=None,
  softcap=None,
  **_,
):
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  b, t, n, d = q.shape
  s, kh = k.shape[1], k.shape[2]
  k, v = np.repeat(k, n // kh, axis=2), np.repeat(v, n // kh, axis=2)
  logits = np.einsum("btnd,bsnd->bnts", q, k) * (
    1 / math.sqrt(d) if scale is None else float(scale)
  )
  if softcap is not None:
    logits = float(softcap) * np.tanh(logits / float(softcap))
  if bias is not None:
    logits = logits + np.asarray(bias, np.float64).reshape(
      (1,) * (4 - np.ndim(bias)) + np.shape(bias)
    )
  ok = np.ones((b, 1, t, s), bool)
  ql = np.full(b, t) if query_seq_lengths is None else np.clip(np.asarray(query_seq_lengths), 0, t)
  kl = (
    np.full(b, s)
    if key_value_seq_lengths is None
    else np.clip(np.asarray(key_value_seq_lengths), 0, s)
  )
  i, j = np.arange(t)[:, None], np.arange(s)[None, :]
  for bb in range(b):
    okb = (i < ql[bb]) & (j < kl[bb])
    off = kl[bb] - ql[bb] if t < s else 0  # bottom-right when the query is shorter
    if is_causal:
      okb &= j <= i + off
    if local_window_size is not None:
      lw = local_window_size if isinstance(local_window_size, tuple) else (local_window_size,) * 2
      okb &= (j >= i + off - lw[0]) & (j <= i + off + lw[1])
    if query_segment_ids is not None:
      okb &= (
        np.asarray(query_segment_ids)[bb][:, None] == np.asarray(key_value_segment_ids)[bb][None]
      )
    ok[bb, 0] = okb
  if mask is not None:
    ok = ok & np.asarray(mask, bool).reshape((1,) * (4 - np.ndim(mask)) + np.shape(mask))
  logits = np.where(ok, logits, -np.inf)
  with np.errstate(invalid="ignore", over="ignore"):
    mx = np.max(logits, -1, keepdims=True)
    w = np.exp(logits - np.where(np.isfinite(mx), mx, 0))
    w = np.where(ok, w, 0)
    p = w / w.sum(-1, keepdims=True)
  p = np.where(ok.any(-1, keepdims=True), p, 0)  # a row with no key gives zeros
  return np.einsum("bnts,bsnd->btnd", p, v)


# ---------------------------------------------------------------- the cases


def norm_cases(kind):
  x, s, b = rand((3, 17)), rand((17,), lo=0.5, hi=1.5), rand((17,))
  base = dict(x=x, scale=s) | (dict(bias=b) if kind == "layer" else {})
  cases = []

  def add(name, arg, **changes):
    cases.append((name, arg, base | changes))

  for bad, label in ((None, "none"), ("x", "str"), ({}, "dict"), (3.0, "scalar")):
    add(f"x {label}", "x", x=bad)
  add("x int32", "x", x=jnp.ones((3, 17), jnp.int32))
  add("x float64", "x", x=x.astype(jnp.float64))
  add("x empty last axis", "x", x=jnp.ones((3, 0)))
  add("x no rows", "x", x=jnp.ones((0, 17)))
  add("x nan", "x", x=x.at[1, 3].set(jnp.nan))
  add("x inf", "x", x=x.at[1, 3].set(jnp.inf))
  add("x large offset", "x", x=x + 1e6)
  add(
    "x one column",
    "x",
    x=rand((3, 1)),
    scale=rand((1,)),
    **({"bias": rand((1,))} if kind == "layer" else {}),
  )
  add("scale wrong shape", "scale", scale=rand((16,)))
  add("scale int", "scale", scale=jnp.ones((17,), jnp.int32))
  add("scale str", "scale", scale="s")
  add("scale 2d", "scale", scale=rand((1, 17)))
  add("scale nan", "scale", scale=s.at[2].set(jnp.nan))
  if kind == "layer":
    add("bias wrong shape", "bias", bias=rand((18,)))
    add("bias int", "bias", bias=jnp.ones((17,), jnp.int32))
  for eps, label in (
    (0.0, "0"),
    (-1.0, "negative"),
    (1e-50, "underflow"),
    (math.inf, "inf"),
    (math.nan, "nan"),
    ("a", "str"),
    (True, "bool"),
    (1e39, "overflow"),
  ):
    add(f"epsilon {label}", "epsilon", epsilon=eps)
  add("residual wrong shape", "residual", residual=rand((3, 16)))
  add("residual int", "residual", residual=jnp.ones((3, 17), jnp.int32))
  add("residual str", "residual", residual="r")
  add("implementation bad", "implementation", implementation="triton")
  add("implementation int", "implementation", implementation=3)
  return cases


def softmax_cases():
  x = rand((3, 17), lo=-4.0, hi=4.0)
  base = dict(x=x)
  cases = []

  def add(name, arg, **changes):
    cases.append((name, arg, base | changes))

  for bad, label in ((None, "none"), ("x", "str"), ({}, "dict"), (3.0, "scalar")):
    add(f"x {label}", "x", x=bad)
  add("x int32", "x", x=jnp.ones((3, 17), jnp.int32))
  add("x bool", "x", x=x > 0)
  add("x float64", "x", x=x.astype(jnp.float64))
  add("x bfloat16", "x", x=x.astype(jnp.bfloat16))
  add("x float16", "x", x=x.astype(jnp.float16))
  add("x rank 0", "x", x=x[0, 0])
  add("x rank 1", "x", x=x[0])
  add("x empty last axis", "x", x=jnp.ones((3, 0), jnp.float32))
  add("x no rows", "x", x=jnp.ones((0, 17), jnp.float32))
  add("x one column", "x", x=rand((3, 1)))
  add("x nan", "x", x=x.at[1, 3].set(jnp.nan))
  add("x inf", "x", x=x.at[1, 3].set(jnp.inf))
  add("x -inf", "x", x=x.at[1, 3].set(-jnp.inf))
  add("x row of -inf", "x", x=x.at[1].set(-jnp.inf))
  add("x large", "x", x=x * 1e4)
  add("x float32 max", "x", x=x.at[0, 0].set(jnp.finfo(jnp.float32).max))
  add("x long row", "x", x=rand((2, 70000)))
  for ax, label in (
    (2, "2"),
    (-3, "-3"),
    (1.5, "float"),
    ("a", "str"),
    (True, "bool"),
    ((1, 1), "repeat"),
    ((), "empty"),
  ):
    add(f"axis {label}", "axis", axis=ax)
  for ax, label in ((0, "0"), (None, "None"), ((0, 1), "tuple"), ([0, 1], "list"), (-2, "-2")):
    add(f"axis {label} valid", "axis", axis=ax)
  keep = np.random.default_rng(1).random((3, 17)) < 0.6
  add("where float", "where", where=jnp.ones((3, 17)))
  add("where int", "where", where=jnp.ones((3, 17), jnp.int32))
  add("where str", "where", where="w")
  add("where wrong shape", "where", where=jnp.ones((4, 17), bool))
  add("where grows x", "where", where=jnp.ones((2, 3, 17), bool))
  add("where valid", "where", where=jnp.asarray(keep))
  add("where broadcast row", "where", where=jnp.asarray(keep[0]))
  add("where all false", "where", where=jnp.zeros((3, 17), bool))
  add("where one row empty", "where", where=jnp.asarray(keep).at[1].set(False))
  add("implementation bad", "implementation", implementation="triton")
  add("implementation int", "implementation", implementation=3)
  return cases


def attention_cases(dtype=np.float32):
  q, k, v = (rand(shape).astype(dtype) for shape in ((2, 5, 4, 8), (2, 6, 2, 8), (2, 6, 2, 8)))
  base = dict(q=q, k=k, v=v)
  cases = []

  def add(name, arg, **changes):
    cases.append((name, arg, base | changes))

  for role, x in (("query", q), ("key", k), ("value", v)):
    key = role[0]
    for bad, label in ((None, "none"), ("s", "str"), ({}, "dict")):
      add(f"{role} {label}", role, **{key: bad})
    add(f"{role} rank 2", role, **{key: x[0, 0]})
    add(f"{role} rank 5", role, **{key: x[None]})
    add(f"{role} int32", role, **{key: x.astype(jnp.int32)})
    add(f"{role} bool", role, **{key: x > 0})
    add(f"{role} nan", role, **{key: x.at[1, 2].set(jnp.nan)})
    add(f"{role} inf", role, **{key: x.at[1, 2, 0, 0].set(jnp.inf)})
  add(
    "query float64",
    "query",
    q=q.astype(jnp.float64),
    k=k.astype(jnp.float64),
    v=v.astype(jnp.float64),
  )
  add("query head_dim 0", "head_dim", q=q[..., :0], k=k[..., :0], v=v[..., :0])
  add("query heads not divisible", "heads", q=rand((2, 5, 3, 8)).astype(dtype))
  add(
    "key batch mismatch",
    "batch",
    k=rand((3, 6, 2, 8)).astype(dtype),
    v=rand((3, 6, 2, 8)).astype(dtype),
  )
  add("value shape", "value", v=rand((2, 7, 2, 8)).astype(dtype))
  add("query large logits", "query", q=q * 1e4, k=k * 1e4)
  add("bias rank 5", "bias", bias=rand((1, 2, 4, 5, 6)))
  add("bias wrong dim", "bias", bias=rand((2, 3, 5, 6)))
  add("bias int", "bias", bias=jnp.ones((2, 4, 5, 6), jnp.int32))
  add("bias bool", "bias", bias=jnp.ones((2, 4, 5, 6), bool))
  add("bias str", "bias", bias="b")
  add("bias float64", "bias", bias=rand((1, 4, 5, 6), np.float64))
  add("bias nan", "bias", bias=rand((1, 4, 5, 6)).at[0, 1, 2, 3].set(jnp.nan))
  add("mask float", "mask", mask=jnp.ones((2, 4, 5, 6)))
  add("mask wrong dim", "mask", mask=jnp.ones((2, 3, 5, 6), bool))
  for sc, label in (
    (0.0, "0"),
    (-1.0, "negative"),
    (1e39, "overflow"),
    (1e-50, "underflow"),
    (math.nan, "nan"),
    (math.inf, "inf"),
    ("a", "str"),
  ):
    add(f"scale {label}", "scale", scale=sc)
  for c, label in (("yes", "str"), (2, "int 2"), (None, "none"), (np.bool_(True), "numpy bool")):
    add(f"is_causal {label}", "is_causal", is_causal=c)
  add("lengths negative", "query_seq_lengths", query_seq_lengths=jnp.array([-1, 3]))
  add("lengths too long", "key_value_seq_lengths", key_value_seq_lengths=jnp.array([9, 2]))
  add("lengths float", "query_seq_lengths", query_seq_lengths=jnp.array([1.0, 2.0]))
  add("lengths shape", "query_seq_lengths", query_seq_lengths=jnp.array([1, 2, 3]))
  add(
    "lengths int64 wrap",
    "key_value_seq_lengths",
    key_value_seq_lengths=jnp.array([2**32 + 3, 4], jnp.int64),
  )
  seg_q, seg_k = jnp.array([[0, 0, 1, 1, 2]] * 2), jnp.array([[0, 1, 1, 2, 2, 2]] * 2)
  add("segments one side", "segment_ids", query_segment_ids=seg_q)
  add("segments shape", "segment_ids", query_segment_ids=seg_q[:, :4], key_value_segment_ids=seg_k)
  add(
    "segments float",
    "segment_ids",
    query_segment_ids=seg_q * 1.0,
    key_value_segment_ids=seg_k * 1.0,
  )
  add(
    "segments int64 wrap",
    "segment_ids",
    query_segment_ids=seg_q.astype(jnp.int64) << 32,
    key_value_segment_ids=seg_k.astype(jnp.int64) << 32,
  )
  for w, label in (
    ((-1, 2), "negative side"),
    ((1.5, 2), "float"),
    (True, "bool"),
    (-3, "negative"),
    ((1, 2, 3), "three"),
    ("a", "str"),
    (2**40, "huge"),
    ((2, 0), "left"),
  ):
    add(f"window {label}", "local_window_size", local_window_size=w)
  for c, label in (
    (0.0, "0"),
    (-1.0, "negative"),
    (math.inf, "inf"),
    (1e-46, "underflow"),
    (math.nan, "nan"),
    (1e39, "overflow"),
    (5.0, "valid"),
  ):
    add(f"softcap {label}", "softcap", softcap=c)
  rng = jax.random.key(1)
  for r, label in (
    (-0.1, "negative"),
    (1.0, "one"),
    (0.99999999, "rounds to one"),
    (math.nan, "nan"),
    ("a", "str"),
  ):
    add(f"dropout_rate {label}", "dropout_rate", dropout_rate=r, dropout_rng=rng)
  add("dropout_rng missing", "dropout_rng", dropout_rate=0.1)
  add("return_logsumexp str", "return_logsumexp", return_logsumexp="x")
  add("deterministic str", "deterministic", deterministic="x")
  add("implementation bad", "implementation", implementation="triton")
  add("implementation int", "implementation", implementation=3)
  return cases


# Words an error may use for an argument (the public names, and the shape
# words checks use for several arguments at once).
ALIASES = {
  "q": "query",
  "head_dim": "head_dim",
  "heads": "heads",
  "batch": "batch",
  "segment_ids": "segment_ids",
}


KINDS = {
  "layer_norm": "layer",
  "rms_norm": "rms",
  "softmax": "softmax",
  "log_softmax": "log_softmax",
}


def run(op, impl):
  kind = KINDS.get(op)
  if kind in ("softmax", "log_softmax"):
    cases = softmax_cases()
  elif kind:
    cases = norm_cases(kind)
  else:  # The CUDA attention kernel takes 16-bit inputs: its table runs in bfloat16.
    cases = attention_cases(jnp.bfloat16 if impl == "cuda" else np.float32)
  for name, arg, kw in cases:
    print(json.dumps({"start": name}), flush=True)
    kw = dict(kw)
    kw.setdefault("implementation", impl)
    outcome, detail = call(op, kind, arg, kw)
    print(json.dumps({"case": name, "outcome": outcome, "detail": detail[:300]}), flush=True)


def call(op, kind, arg, kw):
  import warnings

  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      if kind:
        x = kw.pop("x")
        got = getattr(jaxdnn, op)(x, **kw)
      else:
        q, k, v = kw.pop("q"), kw.pop("k"), kw.pop("v")
        got = jaxdnn.dot_product_attention(q, k, v, **kw)
      got = np.asarray(jax.block_until_ready(got), np.float64)
  except Exception as e:  # noqa: BLE001 - every exception is classified
    msg = f"{type(e).__name__}: {e}"
    named = arg in msg or ALIASES.get(arg, arg) in msg
    return ("error" if named else "unnamed"), msg
  try:
    if kind in ("softmax", "log_softmax"):
      kw.pop("implementation", None)
      want = softmax_oracle(kind == "log_softmax", x, **kw)
    elif kind:
      kw.pop("implementation", None)
      want = norm_oracle(kind, x, **kw)
    else:
      want = attention_oracle(q, k, v, **kw)
  except Exception as e:  # noqa: BLE001
    return "wrong", f"the op returned but the oracle refused: {e}"
  lead = q if not kind else x
  sixteen_bit = getattr(lead, "dtype", None) in (jnp.bfloat16, jnp.float16)
  tol = 3e-2 if sixteen_bit else 2e-3
  scale = max(
    1.0, float(np.nanmax(np.abs(np.where(np.isfinite(want), want, 0))) if want.size else 1)
  )
  try:
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True)
  except AssertionError as e:
    return "wrong", str(e).replace("\n", " ")
  return "match", ""


if __name__ == "__main__":
  run(sys.argv[1], None if sys.argv[2] == "None" else sys.argv[2])
