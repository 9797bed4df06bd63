"""Public glu: gated linear units, value * activation(gate), from the two
halves of one axis (jax.nn.glu's split: the first half is the value) or from
two arrays, as a custom_vjp whose forward and backward are one jaxdnn
primitive each (one pass over the data each way)."""

from __future__ import annotations

import functools
import math
import numbers

import jax
import jax.numpy as jnp

from jaxdnn import _platform
from jaxdnn.activations import kinds, reference
from jaxdnn.activations.api import check_array, cuda_unsupported
from jaxdnn.activations.primitives import glu_backward, glu_forward

_OP = "glu"


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _split(static, x):
  return _split_fwd(static, x)[0]


def _split_fwd(static, x):
  code, param, impl = static
  (out,) = glu_forward.bind(x, act=code, param=param, split=True, implementation=impl)
  return out, x


def _split_bwd(static, x, dout):
  code, param, impl = static
  (dx,) = glu_backward.bind(dout, x, act=code, param=param, split=True, implementation=impl)
  return (dx,)


_split.defvjp(_split_fwd, _split_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _pair(static, value, gate):
  return _pair_fwd(static, value, gate)[0]


def _pair_fwd(static, value, gate):
  code, param, impl = static
  (out,) = glu_forward.bind(value, gate, act=code, param=param, split=False, implementation=impl)
  return out, (value, gate)


def _pair_bwd(static, res, dout):
  code, param, impl = static
  value, gate = res
  dvalue, dgate = glu_backward.bind(
    dout, value, gate, act=code, param=param, split=False, implementation=impl
  )
  return dvalue, dgate


_pair.defvjp(_pair_fwd, _pair_bwd)


def glu(
  x,
  gate=None,
  *,
  activation="sigmoid",
  axis=-1,
  approximate=True,
  negative_slope=0.01,
  alpha=1.0,
  implementation=None,
):
  """Gated linear unit: value * activation(gate), forward and backward in one
  pass each.

  glu(x, axis=a) splits x's axis `a` in two halves, value first (jax.nn.glu's
  and torch's order): "sigmoid" is jax.nn.glu, "silu" SwiGLU, "gelu" GeGLU,
  "relu" ReGLU, "identity" the bilinear unit. glu(x, gate) takes value and
  gate as two arrays of one shape (then `axis` is unused).

  Args:
    x: float32, bfloat16 or float16 (float64 runs on the XLA composition with
      one warning); with no gate, axis `axis` must have even length.
    gate: None, or an array of x's shape and dtype.
    activation: any of bias_act's activations; approximate, negative_slope
      and alpha as there.
    implementation: None, "cuda", "cpu" or "xla" (plain JAX, the oracle).

  Returns:
    x's dtype; x's shape with axis `axis` halved (split), or x's shape.
  """
  check_array(_OP, "x", x)
  code, param = kinds.resolve(
    _OP, activation, approximate=approximate, negative_slope=negative_slope, alpha=alpha
  )
  x = jnp.asarray(x)
  if gate is not None:
    check_array(_OP, "gate", gate)
    gate = jnp.asarray(gate)
    if gate.shape != x.shape or gate.dtype != x.dtype:
      raise ValueError(
        f"{_OP}: gate must have x's shape and dtype {x.shape} {x.dtype}, "
        f"got {gate.shape} {gate.dtype}"
      )
  else:
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
      raise TypeError(f"{_OP}: axis must be an int, got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
      raise ValueError(f"{_OP}: axis {axis} is out of range for x of rank {x.ndim}")
    axis = int(axis) % x.ndim
    if x.shape[axis] % 2:
      raise ValueError(
        f"{_OP}: x's axis {axis} must have even length to split into value and gate, "
        f"got {x.shape[axis]}"
      )
  impl = _platform.resolve(
    implementation,
    _OP,
    cuda_unsupported("jaxdnn_glu_fwd"),
    no_kernel="a float64 x" if x.dtype == jnp.float64 else None,
  )
  static = (code, param, impl)
  if gate is not None:
    if impl == "xla":
      return reference.glu(x, gate, code, param)
    shape = x.shape
    if x.ndim == 0:
      x, gate = x.reshape(1), gate.reshape(1)
    return _pair(static, x, gate).reshape(shape)
  half = x.shape[axis] // 2
  out_shape = x.shape[:axis] + (half,) + x.shape[axis + 1 :]
  if impl == "xla":
    value, g = jnp.split(x, 2, axis=axis)
    return reference.glu(value, g, code, param)
  # Rows of [value | gate] over the dims before `axis`, so leading dims stay
  # leading (and shardable).
  inner = half * math.prod(x.shape[axis + 1 :])
  rows = x.reshape(x.shape[:axis] + (2 * inner,))
  return _split(static, rows).reshape(out_shape)
