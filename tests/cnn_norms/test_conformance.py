"""group_norm and instance_norm under the conformance checks of
tests/conformance.py (edges, Flax equivalence and errors are in
test_group_norm.py)."""

from conformance import ConformanceSuite, OpSpec, Sharded, normal
from jax.sharding import PartitionSpec as P

import jaxdnn

# [batch, *spatial, channels]: odd channel counts, 1D/2D/3D, a single
# position, one sample.
SHAPES = [(2, 5, 8), (3, 4, 5, 12), (1, 3, 2, 2, 6), (4, 1, 16), (2, 7, 7, 32)]
GRAD_SHAPES = [(2, 5, 8), (3, 4, 5, 12)]


def tol(dtype):
  import jax.numpy as jnp

  return {
    jnp.dtype(jnp.float32): 2e-5,
    jnp.dtype(jnp.bfloat16): 2e-2,
    jnp.dtype(jnp.float16): 4e-3,
  }[jnp.dtype(dtype)]


def grad_tol(dtype):
  import jax.numpy as jnp

  return {
    jnp.dtype(jnp.float32): 5e-5,
    jnp.dtype(jnp.bfloat16): 4e-2,
    jnp.dtype(jnp.float16): 8e-3,
  }[jnp.dtype(dtype)]


def gn_silu_residual(x, r, scale, bias, implementation=None):
  return jaxdnn.group_norm(
    x, scale, bias, num_groups=2, activation="silu", residual=r, implementation=implementation
  )


def gn(x, scale, bias, implementation=None):
  return jaxdnn.group_norm(x, scale, bias, num_groups=2, implementation=implementation)


def inorm_relu(x, scale, bias, implementation=None):
  return jaxdnn.instance_norm(x, scale, bias, activation="relu", implementation=implementation)


def inputs(residual):
  def make(rng, shape, dtype):
    x = normal(rng, shape, dtype, scale=2.0, offset=0.5)
    r = (normal(rng, shape, dtype),) if residual else ()
    return (x,) + r + (normal(rng, shape[-1:], offset=1.0, scale=0.3), normal(rng, shape[-1:]))

  return make


def spec(name, fn, residual, target_prefix="jaxdnn_group_norm"):
  data = 2 if residual else 1
  return OpSpec(
    name=name,
    fn=fn,
    make_inputs=inputs(residual),
    shapes=SHAPES,
    grad_shapes=GRAD_SHAPES,
    tol=tol,
    grad_tol=grad_tol,
    fwd_target=f"{target_prefix}_fwd",
    bwd_target=f"{target_prefix}_bwd",
    small_shape=(3, 4, 4, 8),
    check_grads_shape=(2, 3, 4),
    data_argnums=tuple(range(data)),
    sharded=Sharded(
      mesh_shape=(4,),
      axis_names=("data",),
      shape=(8, 4, 4, 8),
      in_specs=(P("data"),) * data + (P(), P()),
      out_specs=(P("data"),),
      bwd_all_reduce=True,
    ),
  )


class TestGroupNorm(ConformanceSuite):
  spec = spec("group_norm", gn, residual=False)


class TestGroupNormSiluResidual(ConformanceSuite):
  spec = spec("group_norm(silu, residual)", gn_silu_residual, residual=True)


class TestInstanceNormRelu(ConformanceSuite):
  spec = spec("instance_norm(relu)", inorm_relu, residual=False)
