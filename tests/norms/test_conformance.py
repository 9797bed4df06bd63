"""LayerNorm and RMSNorm, plain and with a fused residual, under the
conformance checks of tests/conformance.py (the norm-specific cases are in
test_norms.py)."""

from conformance import ConformanceSuite, OpSpec, Sharded, normal
from jax.sharding import PartitionSpec as P
from norm_cases import SHAPES, grad_tol, tol

import jaxdnn

# Shapes of the gradient sweep: a 3-wide row, the scalar path (1000, 4097),
# three leading dims, 33 rows.
GRAD_SHAPES = [(4, 3), (7, 1000), (3, 4097), (2, 3, 4, 64), (33, 128)]
RESIDUAL_SHAPES = [(4, 3), (6, 1000), (2, 3, 256), (3, 4097)]


def layer_norm(x, scale, bias, implementation=None):
  return jaxdnn.layer_norm(x, scale, bias, implementation=implementation)


def rms_norm(x, scale, implementation=None):
  return jaxdnn.rms_norm(x, scale, implementation=implementation)


def layer_norm_residual(x, residual, scale, bias, implementation=None):
  return jaxdnn.layer_norm(
    x, scale, bias, residual=residual, zero_centered_scale=True, implementation=implementation
  )


def rms_norm_residual(x, residual, scale, implementation=None):
  return jaxdnn.rms_norm(
    x, scale, residual=residual, zero_centered_scale=True, implementation=implementation
  )


def inputs(layer, residual):
  """make_inputs: x (rows off zero), the residual, float32 scale (and bias)."""

  def make(rng, shape, dtype):
    x = normal(rng, shape, dtype, scale=2.0, offset=0.5)
    r = (normal(rng, shape, dtype),) if residual else ()
    scale = normal(rng, shape[-1:], scale=0.3, offset=1.0)
    bias = (normal(rng, shape[-1:], scale=0.3),) if layer else ()
    return (x,) + r + (scale,) + bias

  return make


def spec(name, fn, layer, residual):
  rows = P("data", "model", None)
  n_params = 2 if layer else 1
  return OpSpec(
    name=name,
    fn=fn,
    make_inputs=inputs(layer, residual),
    shapes=RESIDUAL_SHAPES if residual else SHAPES,
    grad_shapes=GRAD_SHAPES,
    # The residual sum x + r is the same float32 add rounded once: exact.
    tol=(lambda d: (tol(d), 0.0)) if residual else tol,
    grad_tol=grad_tol,
    fwd_target="jaxdnn_norm_fwd",
    bwd_target="jaxdnn_norm_bwd",
    small_shape=(5, 40),
    check_grads_shape=(3, 17),
    data_argnums=(0, 1) if residual else (0,),
    sharded=Sharded(
      mesh_shape=(2, 2),
      axis_names=("data", "model"),
      shape=(8, 6, 64),
      in_specs=(rows,) * (1 + residual) + (P(),) * n_params,
      out_specs=(rows,) * (1 + residual),
      bwd_all_reduce=True,
    ),
  )  # the parameter gradients sum over the rows


class TestLayerNorm(ConformanceSuite):
  spec = spec("layer_norm", layer_norm, layer=True, residual=False)


class TestRmsNorm(ConformanceSuite):
  spec = spec("rms_norm", rms_norm, layer=False, residual=False)


class TestLayerNormResidual(ConformanceSuite):
  spec = spec("layer_norm+residual", layer_norm_residual, layer=True, residual=True)


class TestRmsNormResidual(ConformanceSuite):
  spec = spec("rms_norm+residual", rms_norm_residual, layer=False, residual=True)
