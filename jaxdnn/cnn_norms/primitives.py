"""The group norm's primitives on the FfiOp base.

Operand order matches cpp/cnn_norms/problem.h; x is [N, S * C] (Python folds
the spatial dims), the parameters per sample [N, C] float32:
  forward:  x, scale, bias, [residual]                  -> y, mean, rstd [N, G]
  backward: dy, x, scale, bias, mean, rstd, [residual]  -> dx, dscale, dbias [N, C], [dresidual]
Samples are independent: the sample dim may be sharded (no communication;
the parameter gradients are per sample, summed by the caller), and vmap
folds its axis into the samples.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension
from jaxdnn._primitive import FfiOp, batch_size, shaped, to_front
from jaxdnn._sharding import ROW, LeadingDimsSharding, row_of

C, G = row_of("c"), row_of("g")


class _GroupNormOp(FfiOp):
  def ffi_attributes(self, *, channels, groups, epsilon, act, param, residual, implementation):
    return dict(
      channels=np.int64(channels),
      groups=np.int64(groups),
      epsilon=np.float32(epsilon),
      act=np.int32(act),
      param=np.float32(param),
      residual=np.int32(residual),
    )

  def workspace(self, platform, avals_in, *, channels, groups, **_):
    """CUDA: float32 partial sums per chunk of positions and the group sums
    (cpp/cnn_norms/sm80/group_norm_launch.h), sized by the C++ plan."""
    if platform != "cuda":
      return []
    x = avals_in[1] if self.name.endswith("bwd") else avals_in[0]
    elems = _extension.plan_query(
      "group_norm_workspace",
      samples=x.shape[0],
      positions=x.shape[1] // channels,
      channels=channels,
      groups=groups,
      itemsize=np.dtype(x.dtype).itemsize,
    )
    return [jax.ShapeDtypeStruct((elems,), jnp.float32)]

  def batch(self, args, dims, **params):
    # The batch axis folds into the samples: statistics are per sample.
    size = batch_size(args, dims)
    moved = [to_front(a, d, size) for a, d in zip(args, dims)]
    folded = [a.reshape((-1,) + a.shape[2:]) for a in moved]
    outs = self.bind(*folded, **params)
    return [o.reshape((size, -1) + o.shape[1:]) for o in outs], [0] * len(outs)


class GroupNormForward(_GroupNormOp):
  name = "jaxdnn_group_norm_fwd"
  target = "jaxdnn_group_norm_fwd"

  def abstract_eval(self, x, *rest, groups, **_):
    stat = shaped((x.shape[0], groups), jnp.float32)
    return [shaped(x.shape, x.dtype), stat, stat]

  def sharding(self, avals_in, avals_out, *, residual, **_):
    ins = (ROW, C, C) + ((ROW,) if residual else ())
    return LeadingDimsSharding(1, 0, ins, (ROW, G, G), reduces_params=False)


class GroupNormBackward(_GroupNormOp):
  name = "jaxdnn_group_norm_bwd"
  target = "jaxdnn_group_norm_bwd"

  def abstract_eval(self, dy, x, scale, *rest, residual, **_):
    outs = [shaped(x.shape, x.dtype), shaped(scale.shape, jnp.float32)]
    outs.append(shaped(scale.shape, jnp.float32))
    if residual:
      outs.append(shaped(x.shape, x.dtype))
    return outs

  def sharding(self, avals_in, avals_out, *, residual, **_):
    ins = (ROW, ROW, C, C, G, G) + ((ROW,) if residual else ())
    outs = (ROW, C, C) + ((ROW,) if residual else ())
    return LeadingDimsSharding(1, 0, ins, outs, reduces_params=False)


group_norm_forward = GroupNormForward()
group_norm_backward = GroupNormBackward()
