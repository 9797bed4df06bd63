"""Plain-JAX LayerNorm and RMSNorm: the "xla" implementation and the test oracle.

Statistics in float32; the output in x's dtype (after promotion with the
residual); `scale`/`bias` used in float32, the way the kernels use them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _pre(x, residual):
  if residual is None:
    return x, None
  z = x + residual
  return z, z


def _affine(y, scale, bias, zero_centered_scale):
  if scale is not None:
    s = scale.astype(jnp.float32)
    y = y * (1.0 + s if zero_centered_scale else s)
  if bias is not None:
    y = y + bias.astype(jnp.float32)
  return y


def layer_norm(x, scale=None, bias=None, *, epsilon=1e-5, residual=None, zero_centered_scale=False):
  z, ret = _pre(x, residual)
  zf = z.astype(jnp.float32)
  # Centred through the row's first element: with a large offset (1e6 + N(0, 1))
  # the shifted values are exact, and no float32 mean near 1e6 (0.03 off) is used.
  shift = jax.lax.stop_gradient(zf[..., :1])
  centred = (zf - shift) - jnp.mean(zf - shift, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(centred), axis=-1, keepdims=True)
  y = centred * jnp.reciprocal(jnp.sqrt(var + epsilon))
  y = _affine(y, scale, bias, zero_centered_scale).astype(z.dtype)
  return y if ret is None else (y, ret)


def rms_norm(x, scale=None, *, epsilon=1e-6, residual=None, zero_centered_scale=False):
  z, ret = _pre(x, residual)
  zf = z.astype(jnp.float32)
  ms = jnp.mean(jnp.square(zf), axis=-1, keepdims=True)
  y = zf * jnp.reciprocal(jnp.sqrt(ms + epsilon))
  y = _affine(y, scale, None, zero_centered_scale).astype(z.dtype)
  return y if ret is None else (y, ret)
