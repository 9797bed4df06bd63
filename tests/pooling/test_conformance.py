"""Pooling under the conformance checks of tests/conformance.py (Flax
equivalence, indices, dilation gradients and errors are in test_pooling.py)."""

import dataclasses

from conformance import ConformanceSuite, OpSpec, Sharded, normal
from jax.sharding import PartitionSpec as P

import jaxdnn


def tol(dtype):
  return 1e-6 if str(dtype) == "float32" else 1e-2


def grad_tol(dtype):
  return 1e-5 if str(dtype) == "float32" else 2e-2


def one(rng, shape, dtype):
  return (normal(rng, shape, dtype, scale=2.0),)


def spec(name, fn, shapes, small, grads_shape):
  return OpSpec(
    name=name,
    fn=fn,
    make_inputs=one,
    shapes=shapes,
    grad_shapes=shapes[:2],
    tol=tol,
    grad_tol=grad_tol,
    fwd_target="jaxdnn_pool_fwd",
    bwd_target="jaxdnn_pool_bwd",
    small_shape=small,
    check_grads_shape=grads_shape,
    sharded=Sharded(
      mesh_shape=(4,),
      axis_names=("data",),
      shape=(8,) + small[1:],
      in_specs=(P("data"),),
      out_specs=(P("data"),),
      bwd_all_reduce=False,
    ),
  )


MAX_2D = spec(
  "max_pool(3x3, s2, SAME)",
  lambda x, implementation=None: jaxdnn.max_pool(
    x, (3, 3), (2, 2), "SAME", implementation=implementation
  ),
  [(2, 9, 8, 5), (1, 7, 7, 3), (3, 4, 5, 16)],
  (2, 6, 6, 8),
  (2, 5, 4, 3),
)
AVG_2D = spec(
  "avg_pool(2x3, pads, no pad count)",
  lambda x, implementation=None: jaxdnn.avg_pool(
    x, (2, 3), (1, 2), ((1, 0), (1, 1)), count_include_pad=False, implementation=implementation
  ),
  [(2, 9, 8, 5), (1, 7, 7, 3), (3, 4, 5, 16)],
  (2, 6, 6, 8),
  (2, 5, 4, 3),
)
MAX_1D = spec(
  "max_pool 1D (dilation 2)",
  lambda x, implementation=None: jaxdnn.max_pool(
    x, 3, 2, dilation=2, implementation=implementation
  ),
  [(2, 17, 5), (3, 9, 8)],
  (2, 12, 8),
  (2, 9, 3),
)
AVG_3D = spec(
  "avg_pool 3D",
  lambda x, implementation=None: jaxdnn.avg_pool(x, 2, 2, "SAME", implementation=implementation),
  [(2, 5, 6, 7, 3), (1, 4, 4, 4, 8)],
  (2, 4, 4, 4, 8),
  (1, 3, 3, 3, 2),
)


class TestMaxPool(ConformanceSuite):
  spec = MAX_2D


class TestAvgPool(ConformanceSuite):
  spec = AVG_2D


class TestMaxPool1D(ConformanceSuite):
  spec = MAX_1D


class TestAvgPool3D(ConformanceSuite):
  spec = dataclasses.replace(AVG_3D)
