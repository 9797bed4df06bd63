"""Plain-JAX pooling: the "xla" implementation and the test oracle
(lax.reduce_window, as Flax's pooling), in float32 and rounded once to x's
dtype."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def pool(x, geo, *, max_, count_include_pad=True):
  acc = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
  xf = x.astype(acc)
  dims = (1,) + geo.window + (1,)
  strides = (1,) + geo.strides + (1,)
  dilation = (1,) + geo.dilation + (1,)
  pads = ((0, 0),) + geo.pads + ((0, 0),)
  if max_ and any(d != 1 for d in geo.dilation):
    return _dilated_max(xf, geo).astype(x.dtype)
  if max_:
    y = jax.lax.reduce_window(
      xf, -jnp.inf, jax.lax.max, dims, strides, pads, window_dilation=dilation
    )
    return y.astype(x.dtype)
  total = jax.lax.reduce_window(xf, 0.0, jax.lax.add, dims, strides, pads, window_dilation=dilation)
  if count_include_pad:
    count = 1.0
    for w in geo.window:
      count *= w
  else:
    ones = jnp.ones(x.shape[1:-1], acc)[None, ..., None]
    count = jax.lax.reduce_window(
      ones, 0.0, jax.lax.add, dims, strides, pads, window_dilation=dilation
    )
  return (total / count).astype(x.dtype)


def _dilated_max(xf, geo):
  """Max pooling with window dilation as a max over the window's strided
  slices (jax.grad of reduce_window max has no rule for dilation)."""
  import itertools

  padded = jnp.pad(xf, ((0, 0),) + geo.pads + ((0, 0),), constant_values=-jnp.inf)
  slices = []
  for offs in itertools.product(*(range(w) for w in geo.window)):
    idx = [slice(None)]
    for j, d, s, o in zip(offs, geo.dilation, geo.strides, geo.out):
      start = j * d
      idx.append(slice(start, start + (o - 1) * s + 1, s))
    idx.append(slice(None))
    slices.append(padded[tuple(idx)])
  return jnp.max(jnp.stack(slices), axis=0)


def adaptive_pool(x, geo, *, max_):
  """PyTorch's adaptive pooling, one output at a time (the oracle)."""
  import itertools

  acc = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
  xf = x.astype(acc)
  spans = [
    [((o * s) // n, -(-(o + 1) * s // n)) for o in range(n)] for s, n in zip(geo.spatial, geo.out)
  ]
  outs = []
  for idx in itertools.product(*(range(n) for n in geo.out)):
    window = xf[
      (slice(None),) + tuple(slice(*spans[k][o]) for k, o in enumerate(idx)) + (slice(None),)
    ]
    axes = tuple(range(1, xf.ndim - 1))
    outs.append(jnp.max(window, axis=axes) if max_ else jnp.mean(window, axis=axes))
  y = jnp.stack(outs, axis=1).reshape((x.shape[0],) + geo.out + (x.shape[-1],))
  return y.astype(x.dtype)
