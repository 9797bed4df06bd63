"""Trace-time argument checks for the norms; every error names the argument."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

SUPPORTED = (jnp.float32, jnp.bfloat16, jnp.float16)


def _is_float(dtype) -> bool:
  return jnp.issubdtype(dtype, jnp.floating)


def check(op, x, scale, bias, residual, epsilon):
  """Returns the dtype of the output (x promoted with residual)."""
  if not hasattr(x, "shape") or not hasattr(x, "dtype"):
    raise TypeError(f"{op}: x must be an array, got {type(x).__name__}")
  if not _is_float(x.dtype):
    raise TypeError(f"{op}: x must be a floating-point array, got dtype {x.dtype}")
  if x.ndim < 1:
    raise ValueError(
      f"{op}: x must have at least one axis (the normalized last axis), got a scalar"
    )
  dim = x.shape[-1]
  if dim == 0:
    raise ValueError(f"{op}: the last axis of x (the normalized axis) is empty; x.shape={x.shape}")
  dtype = x.dtype
  if residual is not None:
    if not hasattr(residual, "shape"):
      raise TypeError(f"{op}: residual must be an array")
    if residual.shape != x.shape:
      raise ValueError(f"{op}: residual must have x's shape {x.shape}, got {residual.shape}")
    if not _is_float(residual.dtype):
      raise TypeError(f"{op}: residual must be floating-point, got dtype {residual.dtype}")
    try:
      dtype = jnp.promote_types(x.dtype, residual.dtype)
    except TypeError as e:
      raise TypeError(
        f"{op}: residual dtype {residual.dtype} cannot be promoted with x dtype {x.dtype}"
      ) from e
  if np.dtype(dtype) not in [np.dtype(d) for d in SUPPORTED]:
    raise TypeError(f"{op}: x (and residual) must be float32, bfloat16 or float16, got {dtype}")
  for name, p in (("scale", scale), ("bias", bias)):
    if p is None:
      continue
    if not hasattr(p, "shape"):
      raise TypeError(f"{op}: {name} must be an array or None")
    if p.shape != (dim,):
      raise ValueError(f"{op}: {name} must have shape ({dim},) (x's last dim), got {p.shape}")
    if not _is_float(p.dtype):
      raise TypeError(f"{op}: {name} must be floating-point, got dtype {p.dtype}")
  if isinstance(epsilon, (int, float, np.floating, np.integer)) and not isinstance(epsilon, bool):
    # epsilon is a float32 kernel attribute: it must stay > 0 and finite there.
    if not (epsilon > 0 and np.float32(epsilon) > 0 and np.isfinite(np.float32(epsilon))):
      raise ValueError(
        f"{op}: epsilon must be > 0 and a finite float32 number "
        f"(at least {np.finfo(np.float32).smallest_subnormal:.3g}), got {epsilon}"
      )
  else:
    raise TypeError(f"{op}: epsilon must be a Python float, got {type(epsilon).__name__}")
  return dtype
