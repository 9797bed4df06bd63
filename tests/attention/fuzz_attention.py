"""Attention's fuzz table (tests/fuzz): invalid and edge-case arguments of
dot_product_attention, and its float64 oracle."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from fuzz_base import FuzzOp, rand

import jaxdnn


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


FUZZ_OPS = {
  "dot_product_attention": FuzzOp(
    # The CUDA kernel takes 16-bit inputs: its table runs in bfloat16.
    cases=lambda impl: attention_cases(jnp.bfloat16 if impl == "cuda" else np.float32),
    inputs=("q", "k", "v"),
    fn=jaxdnn.dot_product_attention,
    oracle=attention_oracle,
    # Words an error may use for an argument: the public names, and the
    # shape words the checks use for several arguments at once.
    aliases={"q": "query"},
  ),
}
