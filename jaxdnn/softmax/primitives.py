"""The softmax family's primitives on the FfiOp base, over the last axis.

Operand order matches cpp/softmax/problem.h:
  forward:  x, [where]      -> y
  backward: y, dy, [where]  -> dx
every operand of one shape; `where` is bool. Rows are independent, so every
leading dim may be sharded and vmap moves its axis to the front.
"""

from __future__ import annotations

import numpy as np

from jaxdnn._primitive import FfiOp, batch_size, shaped, to_front
from jaxdnn._sharding import ROW, LeadingDimsSharding


class _RowOp(FfiOp):
  n_data = 1  # operands before `where`

  def abstract_eval(self, *avals, log, masked, implementation):
    return [shaped(avals[0].shape, avals[0].dtype)]

  def ffi_attributes(self, *, log, masked, implementation):
    return dict(log=np.int32(log), masked=np.int32(masked))

  def sharding(self, avals_in, avals_out, **_):
    x = avals_in[0]
    if x.ndim < 2:
      return None
    return LeadingDimsSharding(x.ndim - 1, 0, (ROW,) * len(avals_in), (ROW,), reduces_params=False)

  def batch(self, args, dims, **params):
    size = batch_size(args, dims)
    outs = self.bind(*(to_front(a, d, size) for a, d in zip(args, dims)), **params)
    return outs, [0]


class SoftmaxForward(_RowOp):
  name = "jaxdnn_softmax_fwd"
  target = "jaxdnn_softmax_fwd"


class SoftmaxBackward(_RowOp):
  name = "jaxdnn_softmax_bwd"
  target = "jaxdnn_softmax_bwd"

  def abstract_eval(self, y, dy, *where, log, masked, implementation):
    return [shaped(y.shape, y.dtype)]


softmax_forward = SoftmaxForward()
softmax_backward = SoftmaxBackward()
