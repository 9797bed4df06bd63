"""The activations family's fuzz table (tests/fuzz): invalid and edge-case
arguments of bias_act and glu, and their float64 oracles (jax.nn's
definitions written in numpy)."""

import math

import jax.numpy as jnp
import numpy as np
from fuzz_base import FuzzOp, rand

import jaxdnn


def activation_np(name, z, approximate=True, negative_slope=0.01, alpha=1.0):
  with np.errstate(all="ignore"):
    relu = np.where(np.isnan(z), z, np.maximum(z, 0.0))
    sig = 1.0 / (1.0 + np.exp(-z))
    if name == "gelu":
      if approximate:
        return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
      erf = np.vectorize(math.erf, otypes=[np.float64])
      return 0.5 * z * (1 + erf(z / math.sqrt(2)))
    return {
      "identity": z,
      "relu": relu,
      "relu6": np.where(np.isnan(z), z, np.clip(z, 0.0, 6.0)),
      "silu": z * sig,
      "sigmoid": sig,
      "tanh": np.tanh(z),
      "elu": np.where(z > 0, z, alpha * np.expm1(np.minimum(z, 0.0))),
      "softplus": np.logaddexp(z, 0.0),
      "leaky_relu": np.where(z >= 0, z, negative_slope * z),
      "squared_relu": relu * relu,
    }[name]


def round_to(x, like):
  """A float64 result rounded through the input's dtype, as the ops return it."""
  return np.asarray(jnp.asarray(x, jnp.float32).astype(like.dtype), np.float64)


def bias_act_oracle(x, bias=None, *, activation, **kw):
  z = np.asarray(x, np.float64)
  if bias is not None:
    z = z + np.asarray(bias, np.float64)
  return round_to(activation_np(activation, z, **kw), x)


def glu_oracle(x, gate=None, *, activation="sigmoid", axis=-1, **kw):
  v = np.asarray(x, np.float64)
  if gate is None:
    v, g = np.split(v, 2, axis=axis)
  else:
    g = np.asarray(gate, np.float64)
  return round_to(v * activation_np(activation, g, **kw), x)


def common_cases(base, add, x, name):
  for bad, label in ((None, "none"), ("x", "str"), ({}, "dict"), (3.0, "scalar")):
    add(f"x {label}", "x", x=bad)
  add("x int32", "x", x=jnp.ones(x.shape, jnp.int32))
  add("x bool", "x", x=x > 0)
  add("x float64", "x", x=x.astype(jnp.float64))
  add("x bfloat16", "x", x=x.astype(jnp.bfloat16))
  add("x float16", "x", x=x.astype(jnp.float16))
  add("x no rows", "x", x=jnp.ones((0,) + x.shape[1:], jnp.float32))
  add("x nan", "x", x=x.at[1, 3].set(jnp.nan))
  add("x inf", "x", x=x.at[1, 3].set(jnp.inf))
  add("x -inf", "x", x=x.at[1, 3].set(-jnp.inf))
  add("x large", "x", x=x * 1e4)
  for act in ("swish", "GELU", "", 3, None):
    add(f"activation {act!r}", "activation", activation=act)
  for act in ("relu", "relu6", "silu", "sigmoid", "tanh", "softplus", "squared_relu", "identity"):
    add(f"activation {act}", "activation", activation=act)
  add("approximate False", "approximate", activation="gelu", approximate=False)
  add("approximate str", "approximate", activation="gelu", approximate="tanh")
  add("elu alpha", "alpha", activation="elu", alpha=0.5)
  add("elu alpha nan", "alpha", activation="elu", alpha=math.nan)
  add("elu alpha overflow", "alpha", activation="elu", alpha=1e39)
  add("leaky_relu slope", "negative_slope", activation="leaky_relu", negative_slope=0.2)
  add("leaky_relu slope str", "negative_slope", activation="leaky_relu", negative_slope="a")
  add("implementation bad", "implementation", implementation="triton")


def bias_act_cases():
  x = rand((4, 24), lo=-4.0, hi=4.0)
  b = rand((24,), lo=-1.0, hi=1.0)
  base = dict(x=x, bias=b, activation="gelu")
  cases = []

  def add(name, arg, **changes):
    cases.append((name, arg, base | changes))

  common_cases(base, add, x, "bias_act")
  add("x one column", "x", x=rand((4, 1)), bias=rand((1,)))
  add("x odd width", "x", x=rand((3, 13)), bias=rand((13,)))
  add("x rank 0", "x", x=x[0, 0], bias=None)
  add("x rank 3", "x", x=rand((2, 3, 24)))
  add("bias none", "bias", bias=None)
  add("bias wrong length", "bias", bias=b[:5])
  add("bias rank 2", "bias", bias=b[None])
  add("bias int", "bias", bias=jnp.ones(24, jnp.int32))
  add("bias bfloat16", "bias", bias=b.astype(jnp.bfloat16))
  add("bias nan", "bias", bias=b.at[2].set(jnp.nan))
  return cases


def glu_cases():
  x = rand((4, 24), lo=-4.0, hi=4.0)
  base = dict(x=x, activation="silu")
  cases = []

  def add(name, arg, **changes):
    cases.append((name, arg, base | changes))

  common_cases(base, add, x, "glu")
  add("x odd split axis", "x", x=rand((4, 13)))
  add("x rank 0", "x", x=x[0, 0])
  add("x rank 3 axis 1", "axis", x=rand((2, 6, 5)), axis=1)
  add("axis 0", "axis", axis=0)
  add("axis -2", "axis", axis=-2)
  add("axis out of range", "axis", axis=2)
  add("axis float", "axis", axis=1.0)
  add("axis bool", "axis", axis=True)
  add("gate valid", "gate", gate=rand((4, 24)))
  add("gate wrong shape", "gate", gate=rand((4, 12)))
  add("gate other dtype", "gate", gate=rand((4, 24)).astype(jnp.bfloat16))
  add("gate int", "gate", gate=jnp.ones((4, 24), jnp.int32))
  add("gate nan", "gate", gate=rand((4, 24)).at[0, 0].set(jnp.nan))
  return cases


FUZZ_OPS = {
  "bias_act": FuzzOp(
    cases=lambda impl: bias_act_cases(),
    inputs=("x",),
    fn=jaxdnn.bias_act,
    oracle=bias_act_oracle,
  ),
  "glu": FuzzOp(
    cases=lambda impl: glu_cases(),
    inputs=("x",),
    fn=jaxdnn.glu,
    oracle=glu_oracle,
  ),
}
