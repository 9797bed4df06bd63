"""The CNN norms' fuzz table (tests/fuzz): invalid and edge-case arguments
of group_norm and batch_norm (its output y), and their float64 oracles."""

import math

import jax.numpy as jnp
import numpy as np
from fuzz_base import FuzzOp, rand

import jaxdnn


def _act(name, z):
  if name is None:
    return z
  with np.errstate(all="ignore"):
    return {"relu": np.where(np.isnan(z), z, np.maximum(z, 0)), "silu": z / (1 + np.exp(-z))}[name]


def _round(y, x):
  return np.asarray(jnp.asarray(y, jnp.float32).astype(jnp.asarray(x).dtype), np.float64)


def group_norm_oracle(
  x, scale=None, bias=None, *, num_groups, epsilon=1e-5, activation=None, residual=None
):
  v = np.asarray(x, np.float64)
  n, c = v.shape[0], v.shape[-1]
  g = v.reshape(n, -1, num_groups, c // num_groups)
  with np.errstate(all="ignore"):
    xhat = (
      (g - g.mean((1, 3), keepdims=True)) / np.sqrt(g.var((1, 3), keepdims=True) + epsilon)
    ).reshape(v.shape)
  z = xhat * (1.0 if scale is None else np.asarray(scale, np.float64)) + (
    0.0 if bias is None else np.asarray(bias, np.float64)
  )
  if residual is not None:
    z = z + np.asarray(jnp.asarray(residual).astype(jnp.asarray(x).dtype), np.float64)
  return _round(_act(activation, z), x)


def batch_norm_oracle(
  x,
  scale=None,
  bias=None,
  *,
  use_running_average,
  epsilon=1e-5,
  activation=None,
  residual=None,
  **_,
):
  v = np.asarray(x, np.float64)
  rows = v.reshape(-1, v.shape[-1])
  with np.errstate(all="ignore"):
    xhat = ((rows - rows.mean(0)) / np.sqrt(rows.var(0) + epsilon)).reshape(v.shape)
  z = xhat * (1.0 if scale is None else np.asarray(scale, np.float64)) + (
    0.0 if bias is None else np.asarray(bias, np.float64)
  )
  if residual is not None:
    z = z + np.asarray(jnp.asarray(residual).astype(jnp.asarray(x).dtype), np.float64)
  return _round(_act(activation, z), x)


def common(add, x):
  for bad, label in ((None, "none"), ("x", "str"), (3.0, "scalar")):
    add(f"x {label}", "x", x=bad)
  add("x int32", "x", x=jnp.ones(x.shape, jnp.int32))
  add("x bfloat16", "x", x=x.astype(jnp.bfloat16))
  add("x float16", "x", x=x.astype(jnp.float16))
  add("x float64", "x", x=x.astype(jnp.float64))
  add("x nan", "x", x=x.at[0, 0, 0, 0].set(jnp.nan))
  add("x large offset", "x", x=x + 100.0)
  add("scale", "scale", scale=rand(x.shape[-1:]))
  add("scale wrong length", "scale", scale=rand((3,)))
  add("bias", "bias", bias=rand(x.shape[-1:]))
  add("bias int", "bias", bias=jnp.ones(x.shape[-1:], jnp.int32))
  add("residual", "residual", residual=rand(x.shape))
  add("residual wrong shape", "residual", residual=rand((2, 2)))
  add("activation silu", "activation", activation="silu")
  add("activation relu", "activation", activation="relu")
  add("activation bad", "activation", activation="swish")
  for v, label in (
    (0.0, "0"),
    (-1.0, "negative"),
    (math.nan, "nan"),
    ("a", "str"),
    (1e-50, "underflow"),
  ):
    add(f"epsilon {label}", "epsilon", epsilon=v)
  add("implementation bad", "implementation", implementation="triton")


def group_norm_cases():
  x = rand((2, 3, 4, 8), lo=-3.0, hi=3.0)
  base = dict(x=x, num_groups=4)
  cases = []

  def add(name, arg, **changes):
    cases.append((name, arg, base | changes))

  common(add, x)
  add("x rank 1", "x", x=x[0, 0, 0])
  add("x no spatial", "x", x=x[:, 0, 0])
  add("x 3D spatial", "x", x=rand((2, 2, 3, 2, 8)))
  add("x one position", "x", x=x[:, :1, :1])
  for v, label in (
    (3, "not dividing"),
    (0, "0"),
    (-2, "negative"),
    (2.0, "float"),
    (True, "bool"),
    (8, "8"),
  ):
    add(f"num_groups {label}", "num_groups", num_groups=v)
  return cases


def batch_norm_cases():
  x = rand((4, 3, 3, 8), lo=-3.0, hi=3.0)
  base = dict(x=x, use_running_average=False)
  cases = []

  def add(name, arg, **changes):
    cases.append((name, arg, base | changes))

  common(add, x)
  add("x rank 2", "x", x=x[:, 0, 0])
  add("x one row", "x", x=x[:1, :1, :1])
  add("use_running_average None", "use_running_average", use_running_average=None)
  add("use_running_average int", "use_running_average", use_running_average=1)
  for v, label in ((1.5, "over 1"), (-0.1, "negative"), (math.nan, "nan"), ("a", "str")):
    add(f"momentum {label}", "momentum", momentum=v)
  return cases


FUZZ_OPS = {
  "group_norm": FuzzOp(
    cases=lambda impl: group_norm_cases(),
    inputs=("x",),
    fn=jaxdnn.group_norm,
    oracle=group_norm_oracle,
  ),
  "batch_norm": FuzzOp(
    cases=lambda impl: batch_norm_cases(),
    inputs=("x",),
    fn=lambda x, **kw: jaxdnn.batch_norm(x, **kw)[0],
    oracle=batch_norm_oracle,
  ),
}
