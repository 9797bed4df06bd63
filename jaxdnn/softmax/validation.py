"""Trace-time argument checks for softmax and log_softmax; every error names
the argument."""

from __future__ import annotations

import numbers

import jax.numpy as jnp
import numpy as np

FLOATS = (
  np.dtype(jnp.float32),
  np.dtype(jnp.bfloat16),
  np.dtype(jnp.float16),
  np.dtype(np.float64),
)


def check_x(op, x):
  if not hasattr(x, "shape") or not hasattr(x, "dtype"):
    raise TypeError(f"{op}: x must be an array, got {type(x).__name__}")
  if np.dtype(x.dtype) not in FLOATS:
    raise TypeError(f"{op}: x must be float32, bfloat16, float16 or float64, got dtype {x.dtype}")


def axes(op, axis, ndim):
  """The softmax axes as a sorted tuple of non-negative ints."""
  if axis is None:
    return tuple(range(ndim))
  items = axis if isinstance(axis, (tuple, list)) else (axis,)
  out = []
  for a in items:
    if isinstance(a, bool) or not isinstance(a, numbers.Integral):
      raise TypeError(f"{op}: axis must be an int, a tuple of ints or None, got {axis!r}")
    if not -ndim <= a < ndim:
      raise ValueError(f"{op}: axis {a} is out of range for x of rank {ndim}")
    out.append(int(a) % ndim)
  if len(set(out)) != len(out):
    raise ValueError(f"{op}: axis repeats an axis: {axis!r}")
  if not out:
    raise ValueError(f"{op}: axis must name at least one axis, got {axis!r}")
  return tuple(sorted(out))


def check_where(op, where, shape):
  if where is None:
    return None
  if not hasattr(where, "shape") or not hasattr(where, "dtype"):
    raise TypeError(f"{op}: where must be a boolean array or None, got {type(where).__name__}")
  if np.dtype(where.dtype) != np.dtype(bool):
    raise TypeError(f"{op}: where must be boolean, got dtype {where.dtype}")
  try:
    np.broadcast_shapes(tuple(where.shape), tuple(shape))
  except ValueError:
    raise ValueError(
      f"{op}: where of shape {tuple(where.shape)} does not broadcast to x's shape {tuple(shape)}"
    ) from None
  if np.broadcast_shapes(tuple(where.shape), tuple(shape)) != tuple(shape):
    raise ValueError(
      f"{op}: where of shape {tuple(where.shape)} would broadcast x's shape {tuple(shape)} up"
    )
  return where
