"""Public batch_norm: Flax's BatchNorm arguments, channels-last, an
activation and a residual fused in the ResNet order
activation(batch_norm(x) + residual), and statistics synchronized across
devices with ONE collective each way (a psum of the stacked partial sums
over `axis_name`, inside shard_map or pmap).

Training takes the batch's statistics about a shift (the running mean: no
cancellation when the batch's mean is near it), in float32; the running
statistics move by `momentum` with the biased batch variance, as Flax's do.
The forward and backward are each two jaxdnn primitives (column sums, then
the elementwise pass) with the collective between them.
"""

from __future__ import annotations

import functools
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import CustomVJPPrimal, SymbolicZero

from jaxdnn import _extension, _platform
from jaxdnn._primitive import extra_vma, match_vma
from jaxdnn.activations import kinds
from jaxdnn.cnn_norms import batch_norm_primitives as prims
from jaxdnn.cnn_norms.api import _check


def _psum_stacked(axis_name, *vectors):
  """The sums of `vectors` over axis_name in one collective."""
  stacked = jax.lax.psum(jnp.stack(vectors), axis_name)
  return tuple(stacked[i] for i in range(len(vectors)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _bn(static, x, scale, bias, residual, running_mean, running_var):
  return _bn_fwd(static, x, scale, bias, residual, running_mean, running_var)[0]


def _kw(static, residual):
  epsilon, momentum, act, param, impl, _, use_running_average = static
  return dict(
    act=act,
    param=param,
    residual=residual is not None,
    training=not use_running_average,
    epsilon=epsilon,
    momentum=momentum,
    implementation=impl,
  )


def _fwd_stats(static, x, running_mean, running_var, kw):
  """The five per-channel vectors the other steps take: shift (the running
  mean), s1, s2, count (all summed over axis_name in one psum) and the
  running variance."""
  axis_name, use_running_average = static[5], static[6]
  zeros = jnp.zeros_like(running_mean)
  if use_running_average:
    return (running_mean, zeros, zeros, zeros + 1.0, running_var)
  s1, s2 = prims.stats.bind(x, running_mean, **kw)
  count = jnp.full_like(s1, x.shape[0])
  if axis_name is not None:
    s1, s2, count = _psum_stacked(axis_name, s1, s2, count)
  return (running_mean, s1, s2, count, running_var)


_RELU = kinds.resolve("batch_norm", "relu", approximate=True, negative_slope=0.0, alpha=1.0)[0]


def _uses_sign_bits(static, x, residual):
  """Whether the forward for the gradient writes ReLU's sign bits for the
  backward (batch_norm.h): where they replace a stream of the activation,
  the residual (or in inference, x)."""
  act, use_running_average = static[2], static[6]
  return act == _RELU and x.shape[-1] % 8 == 0 and (residual is not None or use_running_average)


def _bn_fwd(static, x, scale, bias, residual, running_mean, running_var, sign_bits=False):
  kw = _kw(static, residual)
  res = () if residual is None else (residual,)
  st = _fwd_stats(static, x, running_mean, running_var, kw)
  y, new_mean, new_var, *bits = prims.apply.bind(x, *st, scale, bias, *res, **kw, mask=sign_bits)
  axis_name, use_running_average = static[5], static[6]
  extra = extra_vma(new_mean, running_mean)
  if extra and (use_running_average or extra <= _axes(axis_name)):
    # Inside shard_map the kernel's running statistics vary with x, though
    # they come from statistics already summed over the axes x varies on:
    # the same formula (batch_norm.h's StatsOf) on those sums keeps them
    # replicated, as Flax's are.
    new_mean, new_var = _running_update(static, st, new_mean.dtype)
  # With the sign bits the backward never reads the residual: only its
  # presence is kept (an empty tuple), not the array.
  kept = () if bits and residual is not None else residual
  return (y, new_mean, new_var), (x, st, scale, bias, kept, bits[0] if bits else None)


def _running_update(static, st, dtype):
  momentum, use_running_average = static[1], static[6]
  shift, s1, s2, count, running_var = st
  if use_running_average:
    return shift.astype(dtype), running_var.astype(dtype)
  d = s1 / count
  var = jnp.maximum(s2 / count - d * d, 0.0)
  new_mean = momentum * shift + (1.0 - momentum) * (shift + d)
  return new_mean.astype(dtype), (momentum * running_var + (1.0 - momentum) * var).astype(dtype)


def _value(p):
  return p.value if isinstance(p, CustomVJPPrimal) else p


def _bn_fwd_rule(static, x, scale, bias, residual, running_mean, running_var):
  """The forward for custom_vjp with symbolic zeros: it notes whether scale or
  bias is perturbed. Where neither is (frozen parameters) in inference, the
  backward skips the parameter-gradient reduction, which dx does not need."""
  args = [_value(a) for a in (x, scale, bias)]
  res = None if residual is None else _value(residual)
  out, saved = _bn_fwd(
    static,
    *args,
    res,
    _value(running_mean),
    _value(running_var),
    sign_bits=_uses_sign_bits(static, args[0], res),
  )
  perturbed = any(getattr(p, "perturbed", True) for p in (scale, bias))
  # A Python flag cannot be a residual; the pytree's shape carries it.
  return out, (saved, (None,) if perturbed else ())


def _bn_bwd(static, saved, cts):
  (x, st, scale, bias, residual, bits), want_params = saved
  axis_name, use_running_average = static[5], static[6]
  dy = cts[0]
  if isinstance(dy, SymbolicZero):
    dy = jnp.zeros(dy.shape, dy.dtype)
  kw = _kw(static, residual)
  # The sign bits, where the forward wrote them, in place of the residual.
  res = () if residual is None else (residual,)
  if bits is not None:
    kw, res = kw | {"mask": True}, (bits,)
  if use_running_average and not want_params:
    zeros = jnp.zeros_like(scale)
    outs = prims.bwd_apply.bind(dy, x, *st, scale, bias, zeros, zeros, *res, **kw)
    return outs[0], None, None, (outs[1] if residual is not None else None), None, None
  sum_dz, sum_dzx = prims.bwd_reduce.bind(dy, x, *st, scale, bias, *res, **kw)
  tot_dz, tot_dzx = sum_dz, sum_dzx
  if axis_name is not None and not use_running_average:
    tot_dz, tot_dzx = _psum_stacked(axis_name, sum_dz, sum_dzx)
  outs = prims.bwd_apply.bind(dy, x, *st, scale, bias, tot_dz, tot_dzx, *res, **kw)
  dres = outs[1] if residual is not None else None
  # The parameter gradients in the parameters' types, as JAX's autodiff
  # gives them: summed over the mesh axes the data varies over and the
  # parameters do not (inside shard_map; under pmap, or for parameters that
  # vary, this device's share, for the caller to psum). Where those axes are
  # exactly axis_name the statistics' psum already made the sums.
  if scale is not None and tot_dz is not sum_dz and extra_vma(sum_dzx, scale) == _axes(axis_name):
    return outs[0], tot_dzx, tot_dz, dres, None, None
  return outs[0], match_vma(sum_dzx, scale), match_vma(sum_dz, bias), dres, None, None


def _axes(axis_name):
  if axis_name is None:
    return frozenset()
  return frozenset(axis_name if isinstance(axis_name, (tuple, list)) else (axis_name,))


_bn.defvjp(_bn_fwd_rule, _bn_bwd, symbolic_zeros=True)


def _reference(x, scale, bias, residual, rm, rv, static):
  """Plain JAX: the "xla" implementation and the oracle (two-pass statistics)."""
  epsilon, momentum, act, param, _, axis_name, use_running_average = static
  acc = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
  xf = x.astype(acc)
  if use_running_average:
    mean, var = rm.astype(acc), rv.astype(acc)
  else:
    mean = jnp.mean(xf, 0)
    if axis_name is not None:
      mean = jax.lax.pmean(mean, axis_name)
    var = jnp.mean(jnp.square(xf - mean), 0)
    if axis_name is not None:
      var = jax.lax.pmean(var, axis_name)
  z = (xf - mean) * jax.lax.rsqrt(var + epsilon) * scale.astype(acc) + bias.astype(acc)
  if residual is not None:
    z = z + residual.astype(acc)
  y = kinds.function(act, param)(z).astype(x.dtype)
  if use_running_average:
    return y, rm, rv
  rm32, rv32 = rm.astype(jnp.float32), rv.astype(jnp.float32)
  return y, momentum * rm32 + (1.0 - momentum) * mean, momentum * rv32 + (1.0 - momentum) * var


def batch_norm(
  x,
  scale=None,
  bias=None,
  running_mean=None,
  running_var=None,
  *,
  use_running_average,
  momentum=0.99,
  epsilon=1e-5,
  axis_name=None,
  activation=None,
  residual=None,
  implementation=None,
  **activation_args,
):
  """BatchNorm over channels-last x [..., channels]: statistics over every
  other axis, then activation(xhat * scale + bias + residual).

  Args:
    x: float32, bfloat16 or float16 (float64 runs on the XLA composition
      with one warning).
    scale, bias: None or [channels], any float dtype (used in float32).
    running_mean, running_var: [channels] (None: zeros and ones).
    use_running_average: True (inference: normalize with the running
      statistics, returned unchanged) or False (training: the batch's).
    momentum: the running statistics' decay, Flax's convention
      (new = momentum * old + (1 - momentum) * batch).
    epsilon: added to the variance, a positive float.
    axis_name: None, or the mapped axis (shard_map / pmap) to synchronize
      the statistics over: one psum in the forward, one in the backward.
    activation: None or one of bias_act's activations ("relu" for ResNet);
      `approximate`, `negative_slope`, `alpha` as keyword arguments.
    residual: None or an array of x's shape, added before the activation.
    implementation: None, "cuda", "cpu" or "xla" (plain JAX, the oracle).

  Returns:
    (y, new_running_mean, new_running_var): y of x's shape and dtype, the
    running statistics in their dtype (float32 when None was given).
  """
  op = "batch_norm"
  _check(op, "x", x)
  x = jnp.asarray(x)
  if x.ndim < 1:
    raise ValueError(f"{op}: x must have a channels axis, got a scalar")
  if not isinstance(use_running_average, bool):
    raise TypeError(f"{op}: use_running_average must be a bool, got {use_running_average!r}")
  c = x.shape[-1]
  for name, v in (("momentum", momentum), ("epsilon", epsilon)):
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
      raise TypeError(f"{op}: {name} must be a finite Python float, got {v!r}")
  if not 0.0 <= momentum <= 1.0:
    raise ValueError(f"{op}: momentum must be in [0, 1], got {momentum}")
  if not (epsilon > 0 and np.float32(epsilon) > 0):
    raise ValueError(f"{op}: epsilon must be a positive float32 number, got {epsilon!r}")
  act, param = (
    (0, 0.0)
    if activation is None
    else kinds.resolve(
      op,
      activation,
      **({"approximate": True, "negative_slope": 0.01, "alpha": 1.0} | activation_args),
    )
  )
  params = {}
  for name, v, fill in (
    ("scale", scale, 1.0),
    ("bias", bias, 0.0),
    ("running_mean", running_mean, 0.0),
    ("running_var", running_var, 1.0),
  ):
    if v is not None:
      _check(op, name, v, (c,))
    params[name] = jnp.full((c,), fill, jnp.float32) if v is None else jnp.asarray(v)
  if residual is not None:
    _check(op, "residual", residual, x.shape)
    residual = jnp.asarray(residual).astype(x.dtype)
  impl = _platform.resolve(
    implementation,
    op,
    lambda: (
      None
      if _extension.has_cuda_target("jaxdnn_batch_norm_stats")
      else "this build has no CUDA batch norm kernel"
    ),
    no_kernel="a float64 x" if x.dtype == jnp.float64 else None,
  )
  static = (float(epsilon), float(momentum), act, param, impl, axis_name, use_running_average)
  rm, rv = params["running_mean"], params["running_var"]
  rows = x.reshape(-1, c)
  r = None if residual is None else residual.reshape(-1, c)
  f32 = lambda v: v.astype(jnp.float32)
  if impl == "xla":
    y, new_rm, new_rv = _reference(
      rows, f32(params["scale"]), f32(params["bias"]), r, rm, rv, static
    )
  else:
    y, new_rm, new_rv = _bn(
      static,
      rows,
      f32(params["scale"]),
      f32(params["bias"]),
      r,
      jax.lax.stop_gradient(f32(rm)),
      jax.lax.stop_gradient(f32(rv)),
    )
  y = y.reshape(x.shape)
  if use_running_average:
    return y, rm, rv
  new_rm, new_rv = jax.lax.stop_gradient(new_rm), jax.lax.stop_gradient(new_rv)
  return y, new_rm.astype(rm.dtype), new_rv.astype(rv.dtype)
