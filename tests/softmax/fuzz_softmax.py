"""The softmax family's fuzz table (tests/fuzz): invalid and edge-case
arguments of softmax, log_softmax and softmax_cross_entropy, and their
float64 oracles."""

import math

import jax.numpy as jnp
import numpy as np
from fuzz_base import FuzzOp, rand

import jaxdnn


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


FUZZ_OPS = {
  name: FuzzOp(
    cases=lambda impl: softmax_cases(),
    inputs=("x",),
    fn=getattr(jaxdnn, name),
    oracle=lambda x, log=name == "log_softmax", **kw: softmax_oracle(log, x, **kw),
  )
  for name in ("softmax", "log_softmax")
}


def cross_entropy_oracle(
  logits, labels, label_smoothing=0.0, ignore_index=None, z_loss=0.0, reduction="mean"
):
  x, y = np.asarray(logits, np.float64), np.asarray(labels)
  classes = x.shape[-1]
  with np.errstate(all="ignore"):
    m = x.max(-1, keepdims=True, initial=-np.inf)
    lse = (m + np.log(np.exp(x - m).sum(-1, keepdims=True)))[..., 0]
    picked = np.take_along_axis(x, np.clip(y, 0, classes - 1)[..., None], -1)[..., 0]
    loss = lse - (1 - label_smoothing) * picked + z_loss * lse * lse
    if label_smoothing:
      loss = loss - label_smoothing * x.mean(-1)
    loss = np.where((y >= 0) & (y < classes), loss, np.nan)
    counted = np.ones(y.shape, bool)
    if ignore_index is not None:
      loss = np.where(y == ignore_index, 0.0, loss)
      counted = y != ignore_index
    if reduction == "none":
      return loss
    return loss.sum() if reduction == "sum" else loss.sum() / counted.sum()


def cross_entropy_cases():
  x = rand((4, 13), lo=-4.0, hi=4.0)
  y = jnp.asarray(np.random.default_rng(2).integers(0, 13, size=4), jnp.int32)
  base = dict(logits=x, labels=y)
  cases = []

  def add(name, arg, **changes):
    cases.append((name, arg, base | changes))

  for bad, label in ((None, "none"), ("x", "str"), ({}, "dict"), (3.0, "scalar")):
    add(f"logits {label}", "logits", logits=bad)
  add("logits int32", "logits", logits=jnp.ones((4, 13), jnp.int32))
  add("logits float64", "logits", logits=x.astype(jnp.float64))
  add("logits bfloat16", "logits", logits=x.astype(jnp.bfloat16))
  add("logits no classes", "logits", logits=jnp.ones((4, 0), jnp.float32))
  add("logits no rows", "logits", logits=jnp.ones((0, 13), jnp.float32), labels=y[:0])
  add("logits one class", "logits", logits=rand((4, 1)), labels=jnp.zeros(4, jnp.int32))
  add("logits nan", "logits", logits=x.at[1, 3].set(jnp.nan))
  add("logits inf", "logits", logits=x.at[1, 3].set(jnp.inf))
  add("logits -inf", "logits", logits=x.at[1, 3].set(-jnp.inf))
  add("logits large", "logits", logits=x * 1e4)
  add("logits long rows", "logits", logits=rand((2, 70000)), labels=jnp.array([5, 69999]))
  add("labels float", "labels", labels=y.astype(jnp.float32))
  add("labels bool", "labels", labels=y > 3)
  add("labels str", "labels", labels="y")
  add("labels wrong shape", "labels", labels=y[:3])
  add("labels with class axis", "labels", labels=y[:, None])
  add("labels int64 huge", "labels", labels=y.astype(jnp.int64).at[0].set(2**40))
  add("labels negative", "labels", labels=y.at[0].set(-5))
  add("labels past classes", "labels", labels=y.at[0].set(13))
  add("labels uint8", "labels", labels=y.astype(jnp.uint8))
  for v, label in (
    (-0.1, "negative"),
    (1.5, "over 1"),
    (math.nan, "nan"),
    ("a", "str"),
    (True, "bool"),
  ):
    add(f"label_smoothing {label}", "label_smoothing", label_smoothing=v)
  add("label_smoothing 1", "label_smoothing", label_smoothing=1.0)
  for v, label in ((-1.0, "negative"), (math.inf, "inf"), (math.nan, "nan"), (1e39, "overflow")):
    add(f"z_loss {label}", "z_loss", z_loss=v)
  for v, label in ((1.5, "float"), (True, "bool"), (2**40, "huge"), ("a", "str")):
    add(f"ignore_index {label}", "ignore_index", ignore_index=v)
  add("ignore_index hits", "ignore_index", ignore_index=int(y[0]))
  add("ignore_index every row", "ignore_index", ignore_index=7, labels=jnp.full((4,), 7))
  for v in ("mean", "sum", "none"):
    add(f"reduction {v}", "reduction", reduction=v)
  add("reduction bad", "reduction", reduction="avg")
  add("reduction None", "reduction", reduction=None)
  add("implementation bad", "implementation", implementation="triton")
  return cases


FUZZ_OPS["softmax_cross_entropy"] = FuzzOp(
  cases=lambda impl: cross_entropy_cases(),
  inputs=("logits", "labels"),
  fn=jaxdnn.softmax_cross_entropy,
  oracle=cross_entropy_oracle,
)


def soft_cross_entropy_oracle(logits, labels, label_smoothing=0.0, z_loss=0.0, reduction="mean"):
  x = np.asarray(logits, np.float64)
  q = np.asarray(jnp.asarray(labels).astype(jnp.asarray(logits).dtype), np.float64)
  eps, classes = label_smoothing, x.shape[-1]
  with np.errstate(all="ignore"):
    m = x.max(-1, keepdims=True, initial=-np.inf)
    lse = (m + np.log(np.exp(x - m).sum(-1, keepdims=True)))[..., 0]
    qx = (1 - eps) * (q * x).sum(-1) + (eps / classes * x.sum(-1) if eps else 0.0)
    loss = lse * ((1 - eps) * q.sum(-1) + eps) - qx + z_loss * lse * lse
  if reduction == "none":
    return loss
  return loss.sum() if reduction == "sum" else loss.mean()


def soft_cross_entropy_cases():
  x = rand((4, 13), lo=-4.0, hi=4.0)
  q = np.random.default_rng(3).random((4, 13))
  q = jnp.asarray(q / q.sum(-1, keepdims=True), jnp.float32)
  base = dict(logits=x, labels=q)
  cases = []

  def add(name, arg, **changes):
    cases.append((name, arg, base | changes))

  add("labels probabilities", "labels")
  add("labels one-hot", "labels", labels=jnp.eye(13)[jnp.arange(4)])
  add("labels bfloat16", "labels", labels=q.astype(jnp.bfloat16))
  add("labels float64", "labels", labels=q.astype(jnp.float64))
  add("labels unnormalized", "labels", labels=q * 3)
  add("labels wrong shape", "labels", labels=q[:, :5])
  add("labels nan", "labels", labels=q.at[0, 0].set(jnp.nan))
  add("labels with ignore_index", "ignore_index", ignore_index=0)
  add("logits bfloat16", "logits", logits=x.astype(jnp.bfloat16))
  add("logits nan", "logits", logits=x.at[1, 3].set(jnp.nan))
  add("logits large", "logits", logits=x * 1e4)
  add("logits one class", "logits", logits=rand((4, 1)), labels=jnp.ones((4, 1)))
  add("logits long rows", "logits", logits=rand((2, 70000)), labels=jnp.full((2, 70000), 1 / 70000))
  add("label_smoothing", "label_smoothing", label_smoothing=0.3)
  add("z_loss", "z_loss", z_loss=1e-2)
  for v in ("mean", "sum", "none"):
    add(f"reduction {v}", "reduction", reduction=v)
  return cases


FUZZ_OPS["softmax_cross_entropy(probabilities)"] = FuzzOp(
  cases=lambda impl: soft_cross_entropy_cases(),
  inputs=("logits", "labels"),
  fn=jaxdnn.softmax_cross_entropy,
  oracle=soft_cross_entropy_oracle,
)


def linear_cross_entropy_oracle(hidden, weight, labels, bias=None, chunk_size=None, **kw):
  logits = np.asarray(hidden, np.float64) @ np.asarray(weight, np.float64)
  if bias is not None:
    logits = logits + np.asarray(bias, np.float64)
  logits = np.asarray(jnp.asarray(logits, jnp.float32).astype(jnp.asarray(hidden).dtype))
  return cross_entropy_oracle(
    logits.reshape(-1, logits.shape[-1]), np.asarray(labels).reshape(-1), **kw
  )


def linear_cross_entropy_cases():
  h = rand((6, 8), lo=-1.0, hi=1.0)
  w = rand((8, 11), lo=-1.0, hi=1.0)
  y = jnp.asarray(np.random.default_rng(4).integers(0, 11, size=6), jnp.int32)
  base = dict(hidden=h, weight=w, labels=y)
  cases = []

  def add(name, arg, **changes):
    cases.append((name, arg, base | changes))

  for bad, label in ((None, "none"), ("h", "str"), (3.0, "scalar")):
    add(f"hidden {label}", "hidden", hidden=bad)
  add("hidden int32", "hidden", hidden=jnp.ones((6, 8), jnp.int32))
  add("hidden bfloat16", "weight", hidden=h.astype(jnp.bfloat16), weight=w.astype(jnp.bfloat16))
  add("hidden float64", "hidden", hidden=h.astype(jnp.float64), weight=w.astype(jnp.float64))
  add("hidden rank 3", "hidden", hidden=h.reshape(2, 3, 8), labels=y.reshape(2, 3))
  add("hidden nan", "hidden", hidden=h.at[0, 0].set(jnp.nan))
  add("weight transposed", "weight", weight=w.T)
  add("weight other dtype", "weight", weight=w.astype(jnp.bfloat16))
  add("weight rank 1", "weight", weight=w[:, 0])
  add("weight one class", "weight", weight=w[:, :1], labels=jnp.zeros(6, jnp.int32))
  add("bias", "bias", bias=rand((11,)))
  add("bias wrong length", "bias", bias=rand((8,)))
  add("labels float", "labels", labels=y.astype(jnp.float32))
  add("labels wrong shape", "labels", labels=y[:4])
  add("labels past classes", "labels", labels=y.at[0].set(11))
  add("ignore_index", "ignore_index", ignore_index=int(y[0]))
  add("ignore_index every row", "ignore_index", ignore_index=-1, labels=jnp.full((6,), -1))
  add("label_smoothing", "label_smoothing", label_smoothing=0.2)
  add("z_loss", "z_loss", z_loss=1e-3)
  for v in ("mean", "sum", "none"):
    add(f"reduction {v}", "reduction", reduction=v)
  for v, label in (
    (0, "0"),
    (-1, "negative"),
    (2.5, "float"),
    (True, "bool"),
    (4, "4"),
    (100, "100"),
  ):
    add(f"chunk_size {label}", "chunk_size", chunk_size=v)
  add("implementation bad", "implementation", implementation="triton")
  return cases


FUZZ_OPS["linear_cross_entropy"] = FuzzOp(
  cases=lambda impl: linear_cross_entropy_cases(),
  inputs=("hidden", "weight", "labels"),
  fn=jaxdnn.linear_cross_entropy,
  oracle=linear_cross_entropy_oracle,
)
