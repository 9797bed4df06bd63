"""BatchNorm's four primitives on the FfiOp base (cpp/cnn_norms/batch_norm.h):
x [R, C] (rows = batch x positions), per-channel vectors float32 [C], S the
five vectors shift, s1, s2, count, running_var:
  stats       x, shift                                 -> s1, s2
  apply       x, *S, scale, bias, [residual]           -> y, new running mean, var, [mask]
  bwd_reduce  dy, x, *S, scale, bias, [residual | mask] -> sum_dz, sum_dzx
  bwd_apply   dy, x, *S, scale, bias, t_dz, t_dzx, [residual | mask]
                                                       -> dx, [dresidual]
`mask` (ReLU only, channels a multiple of 8): the forward for the gradient
writes z > 0 as bits, uint8 [R, C / 8], and the backward takes them in
place of the residual (batch_norm.h).
Rows may be sharded: the column sums are psummed over the row shards (the
global view of jit); elementwise steps need nothing. vmap gives every
example its own channels (rows [R, B * C]), so statistics stay per example.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension
from jaxdnn._primitive import FfiOp, batch_size, shaped, to_front
from jaxdnn._sharding import PARAM, ROW, LeadingDimsSharding, row_of

MASK = row_of("m")  # the sign bits' rows: [R, C / 8]


class _BatchNormStep(FfiOp):
  sums = False  # whether the results are per-channel column sums

  def ffi_attributes(
    self, *, act, param, residual, training, epsilon, momentum, implementation, mask=False
  ):
    return dict(
      mask=np.int32(mask),
      act=np.int32(act),
      param=np.float32(param),
      residual=np.int32(residual),
      training=np.int32(training),
      epsilon=np.float32(epsilon),
      momentum=np.float32(momentum),
    )

  def abstract_eval(self, *avals, **params):
    x = next(a for a in avals if a.ndim == 2)
    vector = shaped(x.shape[-1:], jnp.float32)
    outs = [shaped(x.shape, x.dtype)] * self.rows_out(**params) + [vector] * self.vectors_out
    return outs + [shaped((x.shape[0], x.shape[1] // 8), jnp.uint8)] * self.masks_out(**params)

  def masks_out(self, **_):
    return 0

  vectors_out = 0

  def rows_out(self, **_):
    return 0

  def workspace(self, platform, avals_in, **params):
    """CUDA column sums: float32 [chunks, 2, C] partials; `chunks` from the
    C++ plan (common/rows_plan.h, plan query "batch_norm_partials")."""
    if platform != "cuda" or not self.sums:
      return []
    x = next(a for a in avals_in if a.ndim == 2)
    chunks = _extension.plan_query(
      "batch_norm_partials",
      rows=x.shape[0],
      channels=x.shape[1],
      itemsize=np.dtype(x.dtype).itemsize,
    )
    return [jax.ShapeDtypeStruct((chunks, 2, x.shape[1]), jnp.float32)]

  def sharding(self, avals_in, avals_out, **_):
    roles = lambda avals: tuple(
      (MASK if a.dtype == jnp.uint8 else ROW) if a.ndim == 2 else PARAM for a in avals
    )
    return LeadingDimsSharding(1, 0, roles(avals_in), roles(avals_out), reduces_params=self.sums)

  def batch(self, args, dims, **params):
    # Examples become channels: rows [R, B, C] -> [R, B * C], vectors [B * C].
    size = batch_size(args, dims)
    flat = []
    for a, d in zip(args, dims):
      a = to_front(a, d, size)
      flat.append(a.reshape(-1) if a.ndim == 2 else jnp.swapaxes(a, 0, 1).reshape(a.shape[1], -1))
    outs = self.bind(*flat, **params)
    unflat = [
      o.reshape(size, -1) if o.ndim == 1 else jnp.swapaxes(o.reshape(o.shape[0], size, -1), 0, 1)
      for o in outs
    ]
    return unflat, [0] * len(unflat)


class BatchNormStats(_BatchNormStep):
  name = target = "jaxdnn_batch_norm_stats"
  sums = True
  vectors_out = 2


class BatchNormApply(_BatchNormStep):
  name = target = "jaxdnn_batch_norm_apply"
  vectors_out = 2  # the running statistics: per channel, the same on every row shard

  def rows_out(self, **_):
    return 1

  def masks_out(self, *, mask=False, **_):
    return int(mask)


class BatchNormBwdReduce(_BatchNormStep):
  name = target = "jaxdnn_batch_norm_bwd_reduce"
  sums = True
  vectors_out = 2


class BatchNormBwdApply(_BatchNormStep):
  name = target = "jaxdnn_batch_norm_bwd_apply"

  def rows_out(self, *, residual, **_):
    return 2 if residual else 1


stats = BatchNormStats()
apply = BatchNormApply()
bwd_reduce = BatchNormBwdReduce()
bwd_apply = BatchNormBwdApply()
