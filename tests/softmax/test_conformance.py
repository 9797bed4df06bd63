"""softmax and log_softmax, plain and with `where`, under the conformance
checks of tests/conformance.py (jax.nn equivalence, axes and edges are in
test_softmax.py)."""

from conformance import ConformanceSuite, OpSpec, Sharded, normal
from jax.sharding import PartitionSpec as P
from softmax_cases import grad_tol, tol

import jaxdnn

# One column, odd widths, a tail after whole 16-byte vectors, a long row,
# several leading dims, a single row.
SHAPES = [(4, 1), (3, 5), (7, 1000), (2, 3, 4, 65), (1, 4097), (33, 128)]
GRAD_SHAPES = [(4, 3), (7, 1000), (2, 3, 65)]


def plain(log):
  op = jaxdnn.log_softmax if log else jaxdnn.softmax
  return lambda x, implementation=None: op(x, implementation=implementation)


def masked(log):
  op = jaxdnn.log_softmax if log else jaxdnn.softmax
  return lambda x, where, implementation=None: op(x, where=where, implementation=implementation)


def inputs(with_where):
  def make(rng, shape, dtype):
    x = normal(rng, shape, dtype, scale=3.0)
    if not with_where:
      return (x,)
    import jax.numpy as jnp

    keep = rng.random(shape) < 0.7
    keep[..., 0] = True  # every row keeps an entry (all-dropped rows: test_softmax.py)
    return (x, jnp.asarray(keep))

  return make


def spec(name, log, with_where):
  rows = P("data", "model", None)
  return OpSpec(
    name=name,
    fn=masked(log) if with_where else plain(log),
    make_inputs=inputs(with_where),
    shapes=SHAPES,
    grad_shapes=GRAD_SHAPES,
    tol=tol,
    grad_tol=grad_tol,
    fwd_target="jaxdnn_softmax_fwd",
    bwd_target="jaxdnn_softmax_bwd",
    small_shape=(5, 40),
    check_grads_shape=(3, 7),
    diff_argnums=(0,),
    data_argnums=(0, 1) if with_where else (0,),
    sharded=Sharded(
      mesh_shape=(2, 2),
      axis_names=("data", "model"),
      shape=(8, 6, 64),
      in_specs=(rows,) * (2 if with_where else 1),
      out_specs=(rows,),
      bwd_all_reduce=False,
    ),
  )


class TestSoftmax(ConformanceSuite):
  spec = spec("softmax", log=False, with_where=False)


class TestLogSoftmax(ConformanceSuite):
  spec = spec("log_softmax", log=True, with_where=False)


class TestSoftmaxWhere(ConformanceSuite):
  spec = spec("softmax(where)", log=False, with_where=True)


class TestLogSoftmaxWhere(ConformanceSuite):
  spec = spec("log_softmax(where)", log=True, with_where=True)
