"""The softmax family's fuzz table (tests/fuzz): invalid and edge-case
arguments of softmax and log_softmax, and their float64 oracle."""

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
