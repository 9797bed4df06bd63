"""Plain-JAX convolution with the fused epilogue: the "xla" implementation
and the test oracle, and the pieces the primitives lower to where a platform
has no kernel yet. The convolution accumulates in float32 (float64 for
float64 inputs), the epilogue runs in that precision and rounds once:

  z = alpha * conv(x, w) + bias + beta * residual,   y = activation(z)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdnn.activations import kinds
from jaxdnn.conv import transposed
from jaxdnn.conv.geometry import SPECS


def acc_dtype(dtype):
  return jnp.float64 if dtype == jnp.float64 else jnp.float32


def conv(x, w, g, native=False, wide_out=False):
  """lax.conv_general_dilated on channels-last x and Flax-layout w with the
  Geometry g's explicit padding, accumulated in float32 (float64) and
  returned so; native=True: XLA's convolution as user code gets it (x's
  dtype out, default precision: cuDNN's fast paths; wide_out: float32 out,
  as a float32-output call asks), for the lowerings that stand in for a
  missing kernel rather than serve as the oracle."""
  if native and not wide_out and transposed.serves(g):
    return transposed.conv(g, x, w).astype(acc_dtype(x.dtype))
  if native:
    return jax.lax.conv_general_dilated(
      x,
      w,
      window_strides=g.strides,
      padding=g.pads,
      lhs_dilation=g.input_dilation,
      rhs_dilation=g.kernel_dilation,
      dimension_numbers=SPECS[g.ndim],
      feature_group_count=g.groups,
      preferred_element_type=acc_dtype(x.dtype) if wide_out else None,
    ).astype(acc_dtype(x.dtype))
  acc = acc_dtype(x.dtype)
  precision = jax.lax.Precision.HIGHEST if x.dtype in (jnp.float32, jnp.float64) else None
  return jax.lax.conv_general_dilated(
    x,
    w,
    window_strides=g.strides,
    padding=g.pads,
    lhs_dilation=g.input_dilation,
    rhs_dilation=g.kernel_dilation,
    dimension_numbers=SPECS[g.ndim],
    feature_group_count=g.groups,
    precision=precision,
    preferred_element_type=acc,
  )


def epilogue_z(c, bias, residual, alpha, beta):
  """alpha * c + bias + beta * residual in c's (accumulation) dtype."""
  z = c * alpha if alpha != 1.0 else c
  if bias is not None:
    z = z + bias.astype(c.dtype)
  if residual is not None:
    r = residual.astype(c.dtype)
    z = z + (r * beta if beta != 1.0 else r)
  return z


def forward(x, w, bias, residual, g, act, act_param, alpha, beta, out_dtype, native=False):
  """y = activation(alpha * conv + bias + beta * residual), rounded once
  (native: the convolution XLA's way, see conv)."""
  wide_out = jnp.dtype(out_dtype).itemsize > jnp.dtype(x.dtype).itemsize
  z = epilogue_z(conv(x, w, g, native, wide_out), bias, residual, alpha, beta)
  return kinds.function(act, act_param)(z).astype(out_dtype)


def backprop(act, act_param, dy, saved):
  """dL/dz from dL/dy and what the forward saved (the output y for relu and
  relu6, whose derivative it determines, z otherwise), in float32."""
  acc = acc_dtype(dy.dtype)
  dy = dy.astype(acc)
  if saved is None:
    return dy
  _, vjp = jax.vjp(kinds.function(act, act_param), saved.astype(acc))
  return vjp(dy)[0]


def data_grad(dconv, w, g, x_dtype, native=False):
  """dL/dx of conv(x, w) given dL/dconv (a linear map: its transpose);
  native: XLA's data-gradient convolution in x's dtype."""
  x0 = jnp.zeros((g.batch, *g.spatial, g.in_channels), x_dtype)
  if native:
    _, vjp = jax.vjp(lambda x: conv(x, w, g, True).astype(x_dtype), x0)
    return vjp(dconv.astype(x_dtype))[0]
  _, vjp = jax.vjp(lambda x: conv(x, w, g), x0)
  return vjp(dconv.astype(acc_dtype(x_dtype)))[0]


def weight_grad(x, dconv, g, w_shape, w_dtype, native=False):
  """dL/dw of conv(x, w) given dL/dconv; native as data_grad's."""
  w0 = jnp.zeros(w_shape, w_dtype)
  if native:
    _, vjp = jax.vjp(lambda w: conv(x, w, g, True).astype(x.dtype), w0)
    return vjp(dconv.astype(x.dtype))[0]
  _, vjp = jax.vjp(lambda w: conv(x, w, g), w0)
  return vjp(dconv.astype(acc_dtype(x.dtype)))[0]
