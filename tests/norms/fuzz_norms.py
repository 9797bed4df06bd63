"""The norms' fuzz table (tests/fuzz): invalid and edge-case arguments of
layer_norm and rms_norm, and their float64 oracle."""

import math

import jax.numpy as jnp
import numpy as np
from fuzz_base import FuzzOp, rand

import jaxdnn


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


FUZZ_OPS = {
  "layer_norm": FuzzOp(
    cases=lambda impl: norm_cases("layer"),
    inputs=("x",),
    fn=jaxdnn.layer_norm,
    oracle=lambda x, **kw: norm_oracle("layer", x, **kw),
  ),
  "rms_norm": FuzzOp(
    cases=lambda impl: norm_cases("rms"),
    inputs=("x",),
    fn=jaxdnn.rms_norm,
    oracle=lambda x, **kw: norm_oracle("rms", x, **kw),
  ),
}
