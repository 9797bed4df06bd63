"""The activations jaxdnn fuses: names (jax.nn's), the codes the kernels
take (cpp/common/activation.h) and their float32 definitions, which are
jax.nn's, so the "xla" implementation and the oracle are jax.nn itself."""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

NAMES = (
  "identity",
  "relu",
  "relu6",
  "gelu",
  "silu",
  "sigmoid",
  "tanh",
  "elu",
  "softplus",
  "leaky_relu",
  "squared_relu",
)
_CODES = {
  "identity": 0,
  "relu": 1,
  "relu6": 2,
  "silu": 5,
  "sigmoid": 6,
  "tanh": 7,
  "elu": 8,
  "softplus": 9,
  "leaky_relu": 10,
  "squared_relu": 11,
}
_GELU_ERF, _GELU_TANH = 3, 4


def resolve(op, activation, *, approximate, negative_slope, alpha):
  """(code, param) for the kernels: param is leaky_relu's slope or elu's
  alpha (0 otherwise). Errors name the argument."""
  if not isinstance(activation, str) or activation not in NAMES:
    raise ValueError(f"{op}: activation must be one of {NAMES}, got {activation!r}")
  if not isinstance(approximate, bool):
    raise TypeError(f"{op}: approximate must be a bool, got {approximate!r}")
  if activation == "gelu":
    return (_GELU_TANH if approximate else _GELU_ERF), 0.0
  param = 0.0
  if activation == "leaky_relu":
    param = _finite(op, "negative_slope", negative_slope)
  elif activation == "elu":
    param = _finite(op, "alpha", alpha)
  return _CODES[activation], param


def _finite(op, name, value):
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise TypeError(f"{op}: {name} must be a Python float, got {value!r}")
  with np.errstate(over="ignore"):
    f32 = float(np.float32(value))
  if not math.isfinite(f32) or (value != 0 and f32 == 0):
    raise ValueError(f"{op}: {name} must be a finite float32 number, got {value!r}")
  return f32


def function(code, param):
  """The activation `code` as a plain-JAX function (jax.nn's definition)."""
  return {
    0: lambda x: x,
    1: jax.nn.relu,
    2: jax.nn.relu6,
    _GELU_ERF: lambda x: jax.nn.gelu(x, approximate=False),
    _GELU_TANH: lambda x: jax.nn.gelu(x, approximate=True),
    5: jax.nn.silu,
    6: jax.nn.sigmoid,
    7: jnp.tanh,
    8: lambda x: jax.nn.elu(x, param),
    9: jax.nn.softplus,
    10: lambda x: jax.nn.leaky_relu(x, param),
    11: lambda x: jnp.square(jax.nn.relu(x)),
  }[code]
