"""Pooling's primitives on the FfiOp base (cpp/pooling/problem.h): x is
[N, positions * C] (Python folds the spatial dims), the geometry attributes
3 entries each (1D and 2D padded with unit dims):
  forward:  x                  -> y [N, out positions * C], [index int32]
            (max with with_index: the custom_vjp's forward rule and
            return_indices; the plain primal call writes y alone)
  backward: dy, [index] (max)  -> dx
Samples are independent: the batch dim may be sharded, vmap folds into it.
"""

from __future__ import annotations

import numpy as np

from jaxdnn._primitive import FfiOp, batch_size, shaped, to_front
from jaxdnn._sharding import ROW, LeadingDimsSharding, row_of

OUT = row_of("o")


class _PoolOp(FfiOp):
  def ffi_attributes(
    self, *, geometry, channels, max_, count_include_pad, adaptive, implementation
  ):
    names = ("in_dims", "out_dims", "window", "strides", "dilation", "pad_lo")
    attrs = {k: np.asarray(v, np.int64) for k, v in zip(names, geometry)}
    return dict(
      channels=np.int64(channels),
      max=np.int32(max_),
      count_include_pad=np.int32(count_include_pad),
      adaptive=np.int32(adaptive),
      **attrs,
    )

  def batch(self, args, dims, **params):
    size = batch_size(args, dims)
    moved = [to_front(a, d, size) for a, d in zip(args, dims)]
    outs = self.bind(*(a.reshape((-1,) + a.shape[2:]) for a in moved), **params)
    return [o.reshape((size, -1) + o.shape[1:]) for o in outs], [0] * len(outs)


def _positions(dims):
  return int(np.prod(dims))


class PoolForward(_PoolOp):
  name = target = "jaxdnn_pool_fwd"

  def ffi_attributes(self, *, with_index, **params):
    return dict(super().ffi_attributes(**params), with_index=np.int32(with_index))

  def abstract_eval(self, x, *, geometry, channels, max_, with_index, **_):
    if with_index and not max_:
      raise ValueError("pool_forward: with_index is for max pooling only")
    y = shaped((x.shape[0], _positions(geometry[1]) * channels), x.dtype)
    return [y] + ([shaped(y.shape, np.int32)] if with_index else [])

  def sharding(self, avals_in, avals_out, *, with_index, **_):
    outs = (OUT, OUT) if with_index else (OUT,)
    return LeadingDimsSharding(1, 0, (ROW,), outs, reduces_params=False)


class PoolBackward(_PoolOp):
  name = target = "jaxdnn_pool_bwd"

  def abstract_eval(self, dy, *index, geometry, channels, **_):
    return [shaped((dy.shape[0], _positions(geometry[0]) * channels), dy.dtype)]

  def sharding(self, avals_in, avals_out, *, max_, **_):
    return LeadingDimsSharding(1, 0, (OUT, OUT) if max_ else (OUT,), (ROW,), reduces_params=False)


pool_forward = PoolForward()
pool_backward = PoolBackward()
