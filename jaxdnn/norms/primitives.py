"""The norm family's two primitives, forward and backward, on the FfiOp base.

Operand order matches cpp/norms/problem.h:
  forward:  x, [residual], scale, [bias]        -> y, [z], [mean], rstd
  backward: dy, z, scale, [mean], rstd, [dsum]  -> dx, dscale, [dbias]
(bias/mean/dbias for LayerNorm; residual/z/dsum when a residual is fused).
scale and bias are [*groups, D], both float32 or both in x's dtype (read as
they are, converted to float32 in the kernels' registers); dscale and dbias
come back in scale's dtype. `groups` is a prefix of x's leading dims,
non-empty only once vmap has batched the parameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension
from jaxdnn._primitive import (
  CUDA_GRID_YZ_LIMIT,
  FfiOp,
  LaunchSplit,
  batch_size,
  not_mapped,
  shaped,
  to_front,
)
from jaxdnn._sharding import PARAM, ROW, STAT, LeadingDimsSharding

KINDS = {"layer": 0, "rms": 1}


# Where one launch cannot take every parameter group (see launch_split).
SPLIT_LIMITS = {"cuda": CUDA_GRID_YZ_LIMIT}


class NormForward(FfiOp):
  name = "jaxdnn_norm_fwd"
  target = "jaxdnn_norm_fwd"

  @staticmethod
  def roles(kind, residual):
    ins = [ROW] + ([ROW] if residual else []) + [PARAM] + ([PARAM] if kind == "layer" else [])
    outs = [ROW] + ([ROW] if residual else []) + ([STAT] if kind == "layer" else []) + [STAT]
    return tuple(ins), tuple(outs)

  def abstract_eval(self, x, *rest, kind, epsilon, residual, implementation):
    lead = x.shape[:-1]
    outs = [shaped(x.shape, x.dtype)]
    if residual:
      outs.append(shaped(x.shape, x.dtype))
    if kind == "layer":
      outs.append(shaped(lead, jnp.float32))
    outs.append(shaped(lead, jnp.float32))
    return outs

  def ffi_attributes(self, *, kind, epsilon, residual, implementation):
    return dict(
      kind=np.int32(KINDS[kind]), residual=np.int32(residual), epsilon=np.float32(epsilon)
    )

  def sharding(self, avals_in, avals_out, *, kind, residual, **_):
    x, scale = avals_in[0], avals_in[2 if residual else 1]
    if x.ndim < 2:
      return None
    ins, outs = self.roles(kind, residual)
    return LeadingDimsSharding(x.ndim - 1, scale.ndim - 1, ins, outs, reduces_params=False)

  def batch(self, args, dims, *, kind, epsilon, residual, implementation):
    size = batch_size(args, dims)
    ins, _ = self.roles(kind, residual)
    params_batched = any(d is not not_mapped for d, r in zip(dims, ins) if r == PARAM)
    grouped = any(a.ndim > 1 for a, r in zip(args, ins) if r == PARAM)
    new = []
    for a, d, r in zip(args, dims, ins):
      if r == ROW or params_batched or grouped:
        new.append(to_front(a, d, size))
      else:
        new.append(a)
    outs = self.bind(
      *new, kind=kind, epsilon=epsilon, residual=residual, implementation=implementation
    )
    return outs, [0] * len(outs)


class NormBackward(FfiOp):
  name = "jaxdnn_norm_bwd"
  target = "jaxdnn_norm_bwd"

  @staticmethod
  def roles(kind, residual):
    layer = kind == "layer"
    ins = [ROW, ROW, PARAM] + ([STAT] if layer else []) + [STAT] + ([ROW] if residual else [])
    outs = [ROW, PARAM] + ([PARAM] if layer else [])
    return tuple(ins), tuple(outs)

  def abstract_eval(self, dy, z, scale, *rest, kind, residual, implementation):
    # The parameter gradients in the parameters' dtype (bias shares scale's).
    outs = [shaped(z.shape, z.dtype), shaped(scale.shape, scale.dtype)]
    if kind == "layer":
      outs.append(shaped(scale.shape, scale.dtype))
    return outs

  def ffi_attributes(self, *, kind, residual, implementation):
    return dict(kind=np.int32(KINDS[kind]), residual=np.int32(residual))

  def workspace(self, platform, avals_in, *, kind, residual, implementation):
    """CUDA: float32 [groups, partials, 2, dim] partial sums of the parameter
    gradients; `partials` comes from the C++ plan (cpp/norms/plan.h)."""
    if platform != "cuda":
      return []
    z, scale = avals_in[1], avals_in[2]
    groups = int(np.prod(scale.shape[:-1], dtype=np.int64))
    rows = int(np.prod(z.shape[:-1], dtype=np.int64))
    partials = _extension.plan_query(
      "norm_bwd_partials",
      rows=rows,
      dim=z.shape[-1],
      groups=max(groups, 1),
      itemsize=np.dtype(z.dtype).itemsize,
    )
    return [jax.ShapeDtypeStruct((groups, partials, 2, z.shape[-1]), jnp.float32)]

  def launch_split(self, platform, avals_in, *, kind, residual, **_):
    """The CUDA backward puts the parameter groups (per-example gradients
    under vmap) on a grid dimension that stops at 65535: more groups run in
    pieces along the leading group axis, which every operand and result has."""
    limit = SPLIT_LIMITS.get(platform)
    scale = avals_in[2]
    groups = int(np.prod(scale.shape[:-1], dtype=np.int64))
    if limit is None or groups <= limit:
      return None
    inner = int(np.prod(scale.shape[1:-1], dtype=np.int64))
    ins, outs = self.roles(kind, residual)
    return LaunchSplit(scale.shape[0], max(1, limit // inner), (0,) * len(ins), (0,) * len(outs))

  def sharding(self, avals_in, avals_out, *, kind, residual, **_):
    z, scale = avals_in[1], avals_in[2]
    if z.ndim < 2:
      return None
    ins, outs = self.roles(kind, residual)
    return LeadingDimsSharding(z.ndim - 1, scale.ndim - 1, ins, outs, reduces_params=True)

  def batch(self, args, dims, *, kind, residual, implementation):
    # The parameter gradients must come out per batch element, so the
    # parameters always become grouped by the batch axis.
    size = batch_size(args, dims)
    new = [to_front(a, d, size) for a, d in zip(args, dims)]
    outs = self.bind(*new, kind=kind, residual=residual, implementation=implementation)
    return outs, [0] * len(outs)


norm_forward = NormForward()
norm_backward = NormBackward()
