"""bias_act and glu under the conformance checks of tests/conformance.py
(every activation, edges and errors are in test_activations.py)."""

import dataclasses

from activation_cases import grad_tol, tol
from conformance import ConformanceSuite, OpSpec, Sharded, normal
from jax.sharding import PartitionSpec as P

import jaxdnn

# One column, odd widths, a tail after whole 16-byte vectors, a long row,
# several leading dims, a single row.
SHAPES = [(4, 1), (3, 5), (7, 1000), (2, 3, 4, 65), (1, 4097), (33, 128)]
GRAD_SHAPES = [(4, 3), (7, 1000), (2, 3, 64), (65, 24)]
ROWS = P("data", "model", None)


def bias_act(activation, **kw):
  def fn(x, bias, implementation=None):
    return jaxdnn.bias_act(x, bias, activation=activation, implementation=implementation, **kw)

  return fn


def bias_free(activation):
  return lambda x, implementation=None: jaxdnn.bias_act(
    x, activation=activation, implementation=implementation
  )


def glu_split(activation, axis=-1):
  return lambda x, implementation=None: jaxdnn.glu(
    x, activation=activation, axis=axis, implementation=implementation
  )


def glu_pair(activation):
  return lambda x, gate, implementation=None: jaxdnn.glu(
    x, gate, activation=activation, implementation=implementation
  )


def with_bias(rng, shape, dtype):
  return normal(rng, shape, dtype, scale=2.0), normal(rng, shape[-1:], scale=0.5)


def one(rng, shape, dtype):
  return (normal(rng, shape, dtype, scale=2.0),)


def doubled(rng, shape, dtype):
  """x with a last axis twice `shape`'s: value and gate halves."""
  return (normal(rng, shape[:-1] + (2 * shape[-1],), dtype, scale=2.0),)


def two(rng, shape, dtype):
  return normal(rng, shape, dtype, scale=2.0), normal(rng, shape, dtype, scale=2.0)


def spec(name, fn, make, n_rows, *, params=0, bwd_all_reduce=False, **kw):
  return OpSpec(
    name=name,
    fn=fn,
    make_inputs=make,
    shapes=SHAPES,
    grad_shapes=GRAD_SHAPES,
    tol=tol,
    grad_tol=grad_tol,
    small_shape=(5, 40),
    check_grads_shape=(3, 8),
    data_argnums=tuple(range(n_rows)),
    oracle_in_float32=True,  # the kernels round once, from float32
    sharded=Sharded(
      mesh_shape=(2, 2),
      axis_names=("data", "model"),
      shape=(8, 6, 64),
      in_specs=(ROWS,) * n_rows + (P(),) * params,
      out_specs=(ROWS,),
      bwd_all_reduce=bwd_all_reduce,
    ),
    **kw,
  )


BA = dict(fwd_target="jaxdnn_bias_act_fwd", bwd_target="jaxdnn_bias_act_bwd")
GLU = dict(fwd_target="jaxdnn_glu_fwd", bwd_target="jaxdnn_glu_bwd")


class TestBiasActGelu(ConformanceSuite):
  spec = spec(
    "bias_act(gelu)",
    bias_act("gelu", approximate=False),
    with_bias,
    1,
    params=1,
    bwd_all_reduce=True,
    **BA,
  )


class TestBiasActSilu(ConformanceSuite):
  spec = spec("bias_act(silu)", bias_act("silu"), with_bias, 1, params=1, bwd_all_reduce=True, **BA)


class TestBiasActNoBias(ConformanceSuite):
  spec = spec("bias_act(tanh, no bias)", bias_free("tanh"), one, 1, **BA)


class TestGluSplit(ConformanceSuite):
  spec = spec("glu(silu)", glu_split("silu"), doubled, 1, **GLU)


class TestGluSplitAxis(ConformanceSuite):
  # Split along a middle axis: the rows are the dims before it.
  spec = dataclasses.replace(
    spec("glu(sigmoid, axis=1)", glu_split("sigmoid", axis=1), one, 1, **GLU),
    shapes=[(3, 4, 5), (2, 6, 7, 8), (5, 2, 40)],
    grad_shapes=[(3, 4, 5), (5, 2, 40)],
    small_shape=(5, 2, 40),
    check_grads_shape=(3, 2, 4),
    sharded=Sharded(
      mesh_shape=(2, 2),
      axis_names=("data", "model"),
      shape=(8, 6, 64),
      in_specs=(P("data", None, None),),
      out_specs=(P("data", None, None),),
      bwd_all_reduce=False,
    ),
  )


class TestGluPair(ConformanceSuite):
  spec = spec("glu(x, gate, gelu)", glu_pair("gelu"), two, 2, **GLU)
