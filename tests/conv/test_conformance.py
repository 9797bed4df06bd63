"""Convolution under the conformance checks of tests/conformance.py (the
geometry sweep, Flax equivalence and errors are in test_conv.py). Skipped on
a GPU until the CUDA kernels land: there `implementation=None` is XLA's."""

import numpy as np
import pytest
from conformance import ConformanceSuite, OpSpec, Sharded, normal
from conftest import on_gpu
from jax.sharding import PartitionSpec as P

import jaxdnn

pytestmark = pytest.mark.skipif(on_gpu(), reason="no CUDA convolution kernel yet (issue 25)")


def tol(dtype):
  return 2e-5 if str(dtype) == "float32" else 1.6e-2


def grad_tol(dtype):
  return 5e-5 if str(dtype) == "float32" else 3e-2


def conv_inputs(window, groups=1, residual=False, out=None):
  """make_inputs for shape (N, *spatial, C_in, C_out): x, w, bias[, residual]."""

  def make(rng, shape, dtype):
    *xs, cin, cout = shape
    fan = cin // groups * int(np.prod(window))
    x = normal(rng, (*xs, cin), dtype)
    w = normal(rng, (*window, cin // groups, cout), dtype, scale=1.0 / np.sqrt(fan))
    b = normal(rng, (cout,), dtype, scale=0.5)
    if not residual:
      return x, w, b
    return x, w, b, normal(rng, (*xs[:1], *out(xs[1:]), cout), dtype)

  return make


def spec(name, fn, make_inputs, shapes, small, grads_shape, residual=False):
  data = (0, 3) if residual else (0,)
  return OpSpec(
    name=name,
    fn=fn,
    make_inputs=make_inputs,
    shapes=shapes,
    grad_shapes=shapes[:2],
    tol=tol,
    grad_tol=grad_tol,
    fwd_target="jaxdnn_conv_fwd",
    bwd_target="jaxdnn_conv_wgrad",
    small_shape=small,
    check_grads_shape=grads_shape,
    data_argnums=data,
    oracle_in_float32=True,
    check_grads_tol=3e-2,
    sharded=Sharded(
      mesh_shape=(4,),
      axis_names=("data",),
      shape=(8,) + small[1:],
      in_specs=(P("data"), P(), P()) + ((P("data"),) if residual else ()),
      out_specs=(P("data"),),
      bwd_all_reduce=True,
    ),
  )


CONV_2D = spec(
  "conv 3x3 SAME + bias + relu",
  lambda x, w, b, implementation=None: jaxdnn.conv(
    x, w, b, activation="relu", implementation=implementation
  ),
  conv_inputs((3, 3)),
  [(2, 9, 8, 5, 6), (1, 7, 7, 3, 4), (3, 4, 5, 16, 8)],
  (2, 6, 6, 4, 4),
  (1, 4, 4, 2, 3),
)
DEPTHWISE = spec(
  "depthwise 3x3 dilation 2 + gelu",
  lambda x, w, b, implementation=None: jaxdnn.conv(
    x,
    w,
    b,
    kernel_dilation=2,
    feature_group_count=x.shape[-1],
    activation="gelu",
    implementation=implementation,
  ),
  lambda rng, shape, dtype: conv_inputs((3, 3), groups=shape[-2])(rng, shape, dtype),
  [(2, 9, 8, 6, 6), (1, 12, 11, 8, 16)],
  (2, 7, 7, 4, 4),
  (1, 5, 5, 2, 2),
)
CAUSAL_1D = spec(
  "conv 1D causal k5 dilation 2 + residual + silu",
  lambda x, w, b, r, implementation=None: jaxdnn.conv(
    x,
    w,
    b,
    padding="CAUSAL",
    kernel_dilation=2,
    residual=r,
    alpha=0.5,
    beta=2.0,
    activation="silu",
    implementation=implementation,
  ),
  conv_inputs((5,), residual=True, out=lambda s: s),
  [(2, 17, 5, 6), (3, 9, 8, 4)],
  (2, 12, 4, 4),
  (1, 7, 2, 3),
  residual=True,
)
STRIDED_3D = spec(
  "conv 3D 3x3x3 stride 2, 2 groups + tanh",
  lambda x, w, b, implementation=None: jaxdnn.conv(
    x, w, b, strides=2, feature_group_count=2, activation="tanh", implementation=implementation
  ),
  conv_inputs((3, 3, 3), groups=2),
  [(2, 5, 6, 7, 4, 6), (1, 4, 4, 4, 2, 2)],
  (2, 4, 4, 4, 4, 4),
  (1, 3, 3, 3, 2, 2),
)
TRANSPOSE_2D = spec(
  "conv_transpose 4x4 stride 2 + bias",
  lambda x, w, b, implementation=None: jaxdnn.conv_transpose(
    x, w, b, strides=2, padding="SAME", implementation=implementation
  ),
  conv_inputs((4, 4)),
  [(2, 5, 6, 4, 3), (1, 3, 3, 8, 8)],
  (2, 4, 4, 4, 4),
  (1, 3, 3, 2, 2),
)


class TestConv2D(ConformanceSuite):
  spec = CONV_2D


class TestDepthwise(ConformanceSuite):
  spec = DEPTHWISE


class TestCausal1D(ConformanceSuite):
  spec = CAUSAL_1D


class TestStrided3D(ConformanceSuite):
  spec = STRIDED_3D


class TestTranspose2D(ConformanceSuite):
  spec = TRANSPOSE_2D
