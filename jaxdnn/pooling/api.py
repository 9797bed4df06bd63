"""Public pooling: Flax's max_pool / avg_pool arguments (window_shape,
strides, padding "SAME" / "VALID" / (low, high) pairs; count_include_pad),
channels-last [batch, *spatial, channels] with 1-3 spatial dims, as
custom_vjp functions whose forward and backward are jaxdnn primitives. The
max-pool backward routes each gradient to the window's first maximum, as
jax.grad of lax.reduce_window does."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension, _platform
from jaxdnn.pooling import geometry as geom
from jaxdnn.pooling import reference
from jaxdnn.pooling.primitives import pool_backward, pool_forward

FLOATS = tuple(np.dtype(d) for d in (jnp.float32, jnp.bfloat16, jnp.float16, np.float64))


# The forward writes the max pool's int32 index (the backward's residual)
# only where someone needs it: in the forward rule of a gradient, or for
# return_indices; the plain primal call (inference, jax.jit(max_pool))
# writes y alone.
@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _pool(static, return_indices, x):
  outs = pool_forward.bind(x, with_index=static["max_"] and return_indices, **static)
  return outs[0], (outs[1] if len(outs) > 1 else None)


def _pool_fwd(static, return_indices, x):
  outs = pool_forward.bind(x, with_index=static["max_"], **static)
  index = outs[1] if static["max_"] else None
  return (outs[0], index if return_indices else None), index


def _pool_bwd(static, return_indices, index, cts):
  dy = cts[0]
  (dx,) = pool_backward.bind(dy, *(() if index is None else (index,)), **static)
  return (dx,)


_pool.defvjp(_pool_fwd, _pool_bwd)


def _run(
  op,
  x,
  window_shape,
  strides,
  padding,
  dilation,
  max_,
  count_include_pad,
  implementation,
  adaptive_out=None,
  return_indices=False,
):
  if not hasattr(x, "shape") or not hasattr(x, "dtype"):
    raise TypeError(f"{op}: x must be an array, got {type(x).__name__}")
  if np.dtype(x.dtype) not in FLOATS:
    raise TypeError(f"{op}: x must be float32, bfloat16, float16 or float64, got {x.dtype}")
  x = jnp.asarray(x)
  if adaptive_out is None:
    g = geom.make(op, x.shape, window_shape, strides, padding, dilation)
  else:
    g = geom.adaptive(op, x.shape, adaptive_out)
  if not isinstance(count_include_pad, bool):
    raise TypeError(f"{op}: count_include_pad must be a bool, got {count_include_pad!r}")
  impl = _platform.resolve(
    implementation,
    op,
    lambda: None if _extension.has_cuda_target("jaxdnn_pool_fwd") else "no CUDA pooling kernel yet",
    no_kernel="a float64 x" if x.dtype == jnp.float64 else None,
  )
  n, c = x.shape[0], x.shape[-1]
  out_shape = (n,) + g.out + (c,)
  if impl == "xla":
    if adaptive_out is not None:
      return reference.adaptive_pool(x, g, max_=max_), None
    return reference.pool(x, g, max_=max_, count_include_pad=count_include_pad), None
  static = dict(
    geometry=(
      g.padded3(g.spatial, 1),
      g.padded3(g.out, 1),
      g.padded3(g.window, 1),
      g.padded3(g.strides, 1),
      g.padded3(g.dilation, 1),
      g.padded3(tuple(lo for lo, _ in g.pads), 0),
    ),
    channels=c,
    max_=max_,
    count_include_pad=count_include_pad,
    adaptive=adaptive_out is not None,
    implementation=impl,
  )
  y, index = _pool(static, bool(return_indices), x.reshape(n, -1))
  return y.reshape(out_shape), (None if index is None else index.reshape(out_shape))


def max_pool(
  x,
  window_shape,
  strides=None,
  padding="VALID",
  *,
  dilation=None,
  return_indices=False,
  implementation=None,
):
  """Max pooling (Flax's max_pool, plus dilation and PyTorch's return_indices).

  Args:
    x: [batch, *spatial, channels] with 1-3 spatial dims; float32, bfloat16
      or float16 (float64 runs on the XLA composition with one warning).
    window_shape: an int or one int per spatial dim.
    strides: None (1), an int or one int per spatial dim.
    padding: "VALID", "SAME" or one (low, high) pair per spatial dim;
      padding never wins (it is -inf).
    dilation: None (1), an int or one int per spatial dim (window dilation).
    return_indices: also return, per output, the flat index over the input's
      spatial positions of the window's first maximum (-1 for a window of
      padding only), int32 (with the "xla" implementation: not available).
    implementation: None, "cuda", "cpu" or "xla" (plain JAX, the oracle).
  """
  y, index = _run(
    "max_pool",
    x,
    window_shape,
    strides,
    padding,
    dilation,
    True,
    True,
    implementation,
    return_indices=return_indices,
  )
  if not return_indices:
    return y
  if index is None:
    raise ValueError("max_pool: return_indices needs a jaxdnn kernel, not implementation='xla'")
  return y, jax.lax.stop_gradient(index)


def avg_pool(
  x, window_shape, strides=None, padding="VALID", *, count_include_pad=True, implementation=None
):
  """Average pooling (Flax's avg_pool): the window's sum over its size
  (count_include_pad=True, Flax's and PyTorch's default) or over its
  positions inside the input. Other arguments as max_pool's (no dilation)."""
  return _run(
    "avg_pool", x, window_shape, strides, padding, None, False, count_include_pad, implementation
  )[0]


def global_avg_pool(x, *, keepdims=False, implementation=None):
  """The mean over every spatial dim: [batch, *spatial, channels] ->
  [batch, channels] (or with unit spatial dims, keepdims=True)."""
  if not hasattr(x, "shape"):
    raise TypeError(f"global_avg_pool: x must be an array, got {type(x).__name__}")
  y = avg_pool(x, tuple(x.shape[1:-1]), implementation=implementation)
  return y if keepdims else y.reshape(y.shape[0], y.shape[-1])


def adaptive_avg_pool(x, output_size, *, implementation=None):
  """PyTorch's adaptive average pooling: output o of each spatial dim
  averages inputs [floor(o in / out), ceil((o + 1) in / out)).

  Args:
    x: [batch, *spatial, channels] with 1-3 spatial dims.
    output_size: an int or one int per spatial dim (each >= 1).
    implementation: None, "cuda", "cpu" or "xla" (plain JAX, the oracle).
  """
  op = "adaptive_avg_pool"
  return _run(op, x, None, None, None, None, False, False, implementation, output_size)[0]


def adaptive_max_pool(x, output_size, *, return_indices=False, implementation=None):
  """PyTorch's adaptive max pooling (windows as adaptive_avg_pool's;
  return_indices as max_pool's)."""
  op = "adaptive_max_pool"
  y, index = _run(
    op, x, None, None, None, None, True, True, implementation, output_size, return_indices
  )
  if not return_indices:
    return y
  if index is None:
    raise ValueError(f"{op}: return_indices needs a jaxdnn kernel, not implementation='xla'")
  return y, jax.lax.stop_gradient(index)
