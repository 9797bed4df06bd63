"""Public softmax and log_softmax: jax.nn's signatures and semantics (`axis`
an int, a tuple or None; `where` keeps entries, dropped ones give 0, or -inf
for the log), as custom_vjp functions whose forward and backward are both
jaxdnn primitives over the last axis. Other axes move last first (a
transpose), several axes fold into one."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension, _platform
from jaxdnn.softmax import reference, validation
from jaxdnn.softmax.primitives import softmax_backward, softmax_forward


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _rows(log, implementation, x, where):
  w = () if where is None else (where,)
  params = dict(log=log, masked=where is not None, implementation=implementation)
  return softmax_forward.bind(x, *w, **params)[0]


def _rows_fwd(log, implementation, x, where):
  y = _rows(log, implementation, x, where)
  return y, (y, where)


def _rows_bwd(log, implementation, res, dy):
  y, where = res
  w = () if where is None else (where,)
  params = dict(log=log, masked=where is not None, implementation=implementation)
  return softmax_backward.bind(y, dy, *w, **params)[0], None


_rows.defvjp(_rows_fwd, _rows_bwd)


def _cuda_unsupported():
  if not _extension.has_cuda_target("jaxdnn_softmax_fwd"):
    return "this build has no CUDA softmax kernel"
  return None


def _apply(op, x, axis, where, implementation, log):
  validation.check_x(op, x)
  x = jnp.asarray(x)
  if x.ndim == 0:
    raise ValueError(f"{op}: x must have at least one axis, got a scalar")
  axes = validation.axes(op, axis, x.ndim)
  where = validation.check_where(op, where, x.shape)
  impl = _platform.resolve(
    implementation,
    op,
    _cuda_unsupported,
    no_kernel="a float64 x" if x.dtype == jnp.float64 else None,
  )
  if where is not None:
    where = jnp.broadcast_to(where, x.shape)
  # The softmax axes last, folded into one.
  rest = tuple(a for a in range(x.ndim) if a not in axes)
  perm = rest + axes
  moved = perm != tuple(range(x.ndim))
  xt = jnp.transpose(x, perm) if moved else x
  wt = None if where is None else (jnp.transpose(where, perm) if moved else where)
  folded = xt.shape[: len(rest)] + (math.prod(xt.shape[len(rest) :]),)
  xr = xt.reshape(folded)
  wr = None if wt is None else wt.reshape(folded)
  if impl == "xla":
    yr = reference.softmax(xr, wr, log=log)
  else:
    yr = _rows(log, impl, xr, wr)
  y = yr.reshape(xt.shape)
  return jnp.transpose(y, np.argsort(perm)) if moved else y


def softmax(x, axis=-1, where=None, *, implementation=None):
  """jax.nn.softmax on jaxdnn's kernels: exp(x - max) / sum, over `axis`.

  Args:
    x: float32, bfloat16 or float16 (float64 runs on the XLA composition
      with one warning), at least one axis.
    axis: an int, a tuple of ints or None (every axis).
    where: optional boolean array broadcastable to x: the entries to include;
      the others give 0 (and no gradient). A row with none included is all 0.
    implementation: None (the kernel for the platform), "cuda", "cpu" or
      "xla" (plain JAX, also the test oracle).

  Returns:
    An array of x's shape and dtype, computed in float32. NaN and +inf
    behave as in jax.nn (a NaN or +inf in a row makes it NaN).
  """
  return _apply("softmax", x, axis, where, implementation, log=False)


def log_softmax(x, axis=-1, where=None, *, implementation=None):
  """jax.nn.log_softmax on jaxdnn's kernels: (x - max) - log(sum exp(x - max)).

  Same arguments as `softmax`; entries `where` leaves out give -inf (and no
  gradient).
  """
  return _apply("log_softmax", x, axis, where, implementation, log=True)
