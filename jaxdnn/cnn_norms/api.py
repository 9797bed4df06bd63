"""Public group_norm and instance_norm: channels-last, statistics per sample
and group in float32, an activation and a residual fused in the ResNet /
UNet order activation(norm(x) * scale + bias + residual), as a custom_vjp
whose forward and backward are jaxdnn primitives."""

from __future__ import annotations

import functools
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension, _platform
from jaxdnn._primitive import match_vma, vma_token
from jaxdnn.activations import kinds
from jaxdnn.cnn_norms import reference
from jaxdnn.cnn_norms.primitives import group_norm_backward, group_norm_forward

FLOATS = tuple(np.dtype(d) for d in (jnp.float32, jnp.bfloat16, jnp.float16, np.float64))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fused(static, x, scale, bias, residual):
  return _fwd(static, x, scale, bias, residual)[0]


def _params(static, has_residual):
  channels, groups, epsilon, act, param, impl = static
  return dict(
    channels=channels,
    groups=groups,
    epsilon=epsilon,
    act=act,
    param=param,
    residual=has_residual,
    implementation=impl,
  )


def _fwd(static, x, scale, bias, residual):
  res = () if residual is None else (residual,)
  y, mean, rstd = group_norm_forward.bind(x, scale, bias, *res, **_params(static, bool(res)))
  return y, (x, scale, bias, mean, rstd, residual)


def _bwd(static, saved, dy):
  x, scale, bias, mean, rstd, residual = saved
  res = () if residual is None else (residual,)
  outs = group_norm_backward.bind(
    dy, x, scale, bias, mean, rstd, *res, **_params(static, bool(res))
  )
  dscale, dbias = match_vma(outs[1], vma_token(scale)), match_vma(outs[2], vma_token(bias))
  return outs[0], dscale, dbias, (outs[3] if res else None)


_fused.defvjp(_fwd, _bwd)


def _check(op, name, a, shape=None):
  if not hasattr(a, "shape") or not hasattr(a, "dtype"):
    raise TypeError(f"{op}: {name} must be an array, got {type(a).__name__}")
  if np.dtype(a.dtype) not in FLOATS:
    raise TypeError(f"{op}: {name} must be float32, bfloat16, float16 or float64, got {a.dtype}")
  if shape is not None and tuple(a.shape) != tuple(shape):
    raise ValueError(f"{op}: {name} must have shape {tuple(shape)}, got {tuple(a.shape)}")


def _norm(op, x, scale, bias, groups, epsilon, activation, residual, implementation, **act_kw):
  _check(op, "x", x)
  x = jnp.asarray(x)
  if x.ndim < 2:
    raise ValueError(f"{op}: x must be [batch, ..., channels] (at least 2 dims), got {x.shape}")
  channels = x.shape[-1]
  if groups is None:
    groups = channels
  elif isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups < 1:
    raise ValueError(f"{op}: num_groups must be a positive int, got {groups!r}")
  elif channels % groups:
    raise ValueError(
      f"{op}: num_groups ({groups}) must divide the channels ({channels}), x's last axis"
    )
  if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
    raise TypeError(f"{op}: epsilon must be a Python float, got {epsilon!r}")
  if not (math.isfinite(epsilon) and epsilon > 0 and np.float32(epsilon) > 0):
    raise ValueError(f"{op}: epsilon must be a positive float32 number, got {epsilon!r}")
  act, param = (
    (0, 0.0)
    if activation is None
    else kinds.resolve(
      op, activation, **({"approximate": True, "negative_slope": 0.01, "alpha": 1.0} | act_kw)
    )
  )
  for name, p in (("scale", scale), ("bias", bias)):
    if p is not None:
      _check(op, name, p, (channels,))
  if residual is not None:
    _check(op, "residual", residual, x.shape)
    residual = jnp.asarray(residual).astype(x.dtype)
  scale = jnp.ones((channels,), jnp.float32) if scale is None else jnp.asarray(scale)
  bias = jnp.zeros((channels,), jnp.float32) if bias is None else jnp.asarray(bias)
  impl = _platform.resolve(
    implementation,
    op,
    lambda: (
      None
      if _extension.has_cuda_target("jaxdnn_group_norm_fwd")
      else "this build has no CUDA group norm kernel"
    ),
    no_kernel="a float64 x" if x.dtype == jnp.float64 else None,
  )
  kw = dict(groups=int(groups), epsilon=float(epsilon), act=act, param=param)
  if impl == "xla":
    return reference.group_norm(x, scale, bias, residual, **kw)
  n = x.shape[0]
  rows = x.reshape(n, -1)
  # Per-sample float32 parameters (the broadcast's transpose sums the
  # kernel's per-sample gradients over the samples).
  s = jnp.broadcast_to(scale.astype(jnp.float32), (n, channels))
  b = jnp.broadcast_to(bias.astype(jnp.float32), (n, channels))
  r = None if residual is None else residual.reshape(n, -1)
  static = (channels, int(groups), float(epsilon), act, param, impl)
  return _fused(static, rows, s, b, r).reshape(x.shape)


def group_norm(
  x,
  scale=None,
  bias=None,
  *,
  num_groups,
  epsilon=1e-5,
  activation=None,
  residual=None,
  implementation=None,
  **activation_args,
):
  """GroupNorm over channels-last x [batch, *spatial, channels] (1D-3D or no
  spatial dims): per sample, the channels in `num_groups` groups, each
  normalized over its spatial positions and channels, then
  activation(xhat * scale + bias + residual).

  Args:
    x: float32, bfloat16 or float16 (float64 runs on the XLA composition
      with one warning); statistics in float32.
    scale, bias: None or [channels], any float dtype (used in float32).
    num_groups: a positive int dividing the channels (Flax's `num_groups`).
    epsilon: added to the variance (biased), a positive float.
    activation: None or one of bias_act's activations ("silu" for the
      diffusion UNet block); `approximate`, `negative_slope`, `alpha` as
      there, as keyword arguments.
    residual: None or an array of x's shape, added before the activation.
    implementation: None, "cuda", "cpu" or "xla" (plain JAX, the oracle).

  Returns:
    x's shape and dtype.
  """
  return _norm(
    "group_norm",
    x,
    scale,
    bias,
    num_groups,
    epsilon,
    activation,
    residual,
    implementation,
    **activation_args,
  )


def instance_norm(
  x,
  scale=None,
  bias=None,
  *,
  epsilon=1e-5,
  activation=None,
  residual=None,
  implementation=None,
  **activation_args,
):
  """InstanceNorm: group_norm with one channel a group (each channel of each
  sample normalized over its spatial positions); same arguments."""
  return _norm(
    "instance_norm",
    x,
    scale,
    bias,
    None,
    epsilon,
    activation,
    residual,
    implementation,
    **activation_args,
  )
