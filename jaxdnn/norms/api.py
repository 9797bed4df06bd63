"""Public LayerNorm and RMSNorm: custom_vjp functions over the two primitives."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxdnn import _platform
from jaxdnn._primitive import match_vma, vma_token
from jaxdnn.norms import reference, validation
from jaxdnn.norms.primitives import norm_backward, norm_forward


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _norm(kind, epsilon, implementation, x, residual, scale, bias):
  return _forward(kind, epsilon, implementation, x, residual, scale, bias)[0]


def _forward(kind, epsilon, implementation, x, residual, scale, bias):
  has_res = residual is not None
  args = [x] + ([residual] if has_res else []) + [scale] + ([bias] if kind == "layer" else [])
  outs = list(
    norm_forward.bind(
      *args, kind=kind, epsilon=float(epsilon), residual=has_res, implementation=implementation
    )
  )
  y = outs.pop(0)
  z = outs.pop(0) if has_res else x
  mean = outs.pop(0) if kind == "layer" else None
  rstd = outs.pop(0)
  primal = (y, z) if has_res else y
  return primal, (z, scale, mean, rstd, vma_token(bias))


def _norm_bwd(kind, epsilon, implementation, saved, ct):
  z, scale, mean, rstd, bias_token = saved
  has_res = isinstance(ct, tuple)  # (dy, dsum) when the residual sum was returned
  dy, dsum = ct if has_res else (ct, None)
  args = [dy, z, scale] + ([mean] if kind == "layer" else []) + [rstd] + ([dsum] if has_res else [])
  outs = norm_backward.bind(*args, kind=kind, residual=has_res, implementation=implementation)
  dx, dscale = outs[0], match_vma(outs[1], vma_token(scale))
  dbias = match_vma(outs[2], bias_token) if kind == "layer" else None
  return dx, (dx if has_res else None), dscale, dbias


_norm.defvjp(_forward, _norm_bwd)


def _params(scale, bias, dim, zero_centered_scale, layer, dtype):
  # The kernels read parameters in float32 or in x's dtype (converted to
  # float32 in registers) and return their gradients in that dtype, so
  # parameters already in one of those go in as they are: no convert runs
  # before the kernel or after its backward. Anything else (another dtype,
  # scale and bias of different dtypes, a parameter left out and synthesized
  # here, the zero-centred +1) is cast to float32 outside the custom_vjp, so
  # autodiff carries the gradient back to the caller's dtype.
  given = [p for p in ((scale, bias) if layer else (scale,)) if p is not None]
  native = {jnp.dtype(jnp.float32), jnp.dtype(dtype)}
  dtypes = {jnp.dtype(p.dtype) for p in given}
  if len(given) == (2 if layer else 1) and not zero_centered_scale and len(dtypes) == 1:
    (pdtype,) = dtypes
    if pdtype in native:
      return scale, (bias if layer else None)
  if scale is None:
    s = jnp.ones((dim,), jnp.float32)
  else:
    s = scale.astype(jnp.float32)
    if zero_centered_scale:
      s = s + 1.0
  if not layer:
    return s, None
  b = jnp.zeros((dim,), jnp.float32) if bias is None else bias.astype(jnp.float32)
  return s, b


def layer_norm(
  x,
  scale=None,
  bias=None,
  *,
  epsilon=1e-5,
  residual=None,
  zero_centered_scale=False,
  implementation=None,
):
  """LayerNorm over the last axis of `x`, statistics in float32.

  Args:
    x: [..., D] float32, bfloat16 or float16.
    scale, bias: optional [D] parameters (any floating dtype). In float32 or
      in x's dtype (both the same) the kernels read them as they are and
      return their gradients in that dtype; others are cast to float32.
    epsilon: added to the variance; must be > 0.
    residual: optional array like `x`; normalizes `x + residual` and returns
      `(y, x + residual)`, the pre-norm residual stream of a transformer.
    zero_centered_scale: multiply by `1 + scale` instead of `scale`.
    implementation: None (the kernel for the platform), "cuda", "cpu" or
      "xla" (plain JAX, also the test oracle).

  Returns:
    y in x's dtype (promoted with residual), or `(y, x + residual)`.
  """
  dtype = validation.check("layer_norm", x, scale, bias, residual, epsilon)
  impl = _platform.resolve(implementation, "layer_norm")
  if impl == "xla":
    return reference.layer_norm(
      x, scale, bias, epsilon=epsilon, residual=residual, zero_centered_scale=zero_centered_scale
    )
  s, b = _params(scale, bias, x.shape[-1], zero_centered_scale, True, dtype)
  res = None if residual is None else residual.astype(dtype)
  return _norm("layer", float(epsilon), impl, x.astype(dtype), res, s, b)


def rms_norm(
  x, scale=None, *, epsilon=1e-6, residual=None, zero_centered_scale=False, implementation=None
):
  """RMSNorm over the last axis of `x`, statistics in float32.

  Same arguments and result as `layer_norm`, without centring or bias.
  """
  dtype = validation.check("rms_norm", x, scale, None, residual, epsilon)
  impl = _platform.resolve(implementation, "rms_norm")
  if impl == "xla":
    return reference.rms_norm(
      x, scale, epsilon=epsilon, residual=residual, zero_centered_scale=zero_centered_scale
    )
  s, _ = _params(scale, None, x.shape[-1], zero_centered_scale, False, dtype)
  res = None if residual is None else residual.astype(dtype)
  return _norm("rms", float(epsilon), impl, x.astype(dtype), res, s, None)
