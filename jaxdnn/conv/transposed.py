"""Input-dilated convolutions (conv_transpose's) on XLA's convolutions, written
as what they are: the data gradient of a strided convolution.

An input-dilated convolution with an unreversed kernel, as
lax.conv_transpose and Flax's ConvTranspose emit it, is not a pattern XLA's
GPU backend maps onto cuDNN's data-gradient kernel, and its weight gradient
(a convolution of the dilated input) is slower still: on an H200 the 3-D
3x3x3 stride-2 case of the benchmark took 11.4 ms forward+backward in XLA
against PyTorch's 0.22 ms (docs/perf/conv.md). With

  h(z, w2) = conv(z, w2, strides=s, padding=P2)

the strided convolution it transposes (w2 the window reversed with its
channel axes swapped, P2_lo = dilated window - 1 - lo), the forward is
h's vjp in z (the reversed kernel XLA matches as a data-gradient
convolution), the data gradient is h itself, and the weight gradient h's
vjp in w2 (a weight-gradient convolution): each a kernel cuDNN has.

Being a custom_vjp, it has no forward mode (jax.jvp, jacfwd), as jaxdnn's
own convolution primitives have none.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxdnn.conv.geometry import SPECS


def _strided_padding(g):
  """P2 per spatial dim, or None where the strided convolution would need a
  negative pad."""
  pads = []
  for n, z, k, d, s, (lo, _) in zip(
    g.spatial, g.out, g.window, g.kernel_dilation, g.input_dilation, g.pads
  ):
    kd = (k - 1) * d + 1
    p_lo = kd - 1 - lo
    p_hi = (n - 1) * s + kd - z - p_lo
    if p_lo < 0 or p_hi < 0 or (z + p_lo + p_hi - kd) // s + 1 != n:
      return None
    pads.append((p_lo, p_hi))
  return tuple(pads)


def serves(g) -> bool:
  """An input-dilated, unstrided, ungrouped convolution whose transposed
  problem needs no negative padding."""
  return (
    g.groups == 1
    and any(d > 1 for d in g.input_dilation)
    and all(s == 1 for s in g.strides)
    and _strided_padding(g) is not None
  )


def _reversed(w, n):
  """The window reversed, the channel axes swapped (an involution)."""
  return jnp.swapaxes(jnp.flip(w, axis=tuple(range(n))), -1, -2)


def _strided(z, w2, g):
  return jax.lax.conv_general_dilated(
    z,
    w2,
    window_strides=g.input_dilation,
    padding=_strided_padding(g),
    rhs_dilation=g.kernel_dilation,
    dimension_numbers=SPECS[g.ndim],
  )


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def conv(g, x, w):
  """The input-dilated convolution of x [N, *spatial, C_in] with w [*window,
  C_in, C_out] (Geometry g), in x's dtype, as XLA's data-gradient
  convolution of the strided problem."""
  return _forward(g, x, w)[0]


def _forward(g, x, w):
  z0 = jnp.zeros((x.shape[0], *g.out, g.out_channels), x.dtype)
  _, vjp = jax.vjp(lambda z: _strided(z, _reversed(w, g.ndim), g), z0)
  return vjp(x)[0], (x, w)


def _backward(g, res, dy):
  x, w = res
  dy = dy.astype(x.dtype)
  dx, vjp = jax.vjp(lambda w2: _strided(dy, w2, g), _reversed(w, g.ndim))
  dw = _reversed(vjp(x)[0], g.ndim)
  return dx.astype(x.dtype), dw.astype(w.dtype)


conv.defvjp(_forward, _backward)
