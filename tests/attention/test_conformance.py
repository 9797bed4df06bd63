"""dot_product_attention under the conformance checks of tests/conformance.py:
plain (with the log-sum-exp, over the shape sweep) and causal GQA with a
differentiable bias. Options, masks, dropout and GPU shapes are in
test_attention.py."""

import jax.numpy as jnp
from attention_cases import SHAPES, Dims, grad_tol, tol
from conformance import ConformanceSuite, OpSpec, Sharded, normal
from jax.sharding import PartitionSpec as P

import jaxdnn

# Self attention with GQA, and cross attention both ways.
OPTION_DIMS = [Dims(2, 33, 33, 4, 2, 64), Dims(2, 7, 33, 4, 1, 40), Dims(2, 33, 7, 2, 2, 96)]
# Queries shorter than the keys: the causal diagonal aligned bottom-right.
SMALL = Dims(2, 7, 33, 4, 2, 64)
# Batch over "data", heads over "model" (the kv heads split with them).
SHARDED = Dims(2, 33, 7, 8, 2, 64)
BTNH = P("data", None, "model", None)


def attention_lse(q, k, v, implementation=None):
  return jaxdnn.dot_product_attention(q, k, v, return_logsumexp=True, implementation=implementation)


def causal_bias(q, k, v, bias, implementation=None):
  return jaxdnn.dot_product_attention(q, k, v, bias, is_causal=True, implementation=implementation)


def inputs(with_bias):
  """make_inputs: q, k, v [batch, len, heads, head_dim] (and a [B, N, T, S] bias)."""

  def make(rng, d, dtype):
    q = normal(rng, (d.batch, d.q_len, d.heads, d.head_dim), dtype)
    k = normal(rng, (d.batch, d.kv_len, d.kv_heads, d.head_dim), dtype)
    v = normal(rng, (d.batch, d.kv_len, d.kv_heads, d.head_dim), dtype)
    bias = (normal(rng, (d.batch, d.heads, d.q_len, d.kv_len), dtype, scale=0.5),)
    return (q, k, v) + (bias if with_bias else ())

  return make


COMMON = dict(
  grad_tol=grad_tol,
  fwd_target="jaxdnn_attention_fwd",
  bwd_target="jaxdnn_attention_bwd",
  small_shape=SMALL,
  check_grads_shape=Dims(1, 5, 6, 2, 1, 8),
  gpu_dtypes=(jnp.bfloat16, jnp.float16),
)


class TestDotProductAttention(ConformanceSuite):
  spec = OpSpec(
    name="dot_product_attention",
    fn=attention_lse,
    make_inputs=inputs(False),
    shapes=SHAPES,
    grad_shapes=[SMALL, Dims(2, 33, 7, 4, 2, 128)],
    # The output, and the float32 log-sum-exp.
    tol=lambda d: (tol(d), 1e-5 if d == jnp.float32 else 1e-2),
    sharded=Sharded(
      mesh_shape=(2, 2),
      axis_names=("data", "model"),
      shape=SHARDED,
      in_specs=(BTNH,) * 3,
      out_specs=(BTNH, P("data", None, "model")),
      bwd_all_reduce=False,
    ),
    **COMMON,
  )


class TestDotProductAttentionCausalBias(ConformanceSuite):
  spec = OpSpec(
    name="dot_product_attention(causal,GQA,bias)",
    fn=causal_bias,
    make_inputs=inputs(True),
    shapes=OPTION_DIMS,
    grad_shapes=OPTION_DIMS,
    tol=tol,
    sharded=Sharded(
      mesh_shape=(2, 2),
      axis_names=("data", "model"),
      shape=SHARDED,
      in_specs=(BTNH,) * 3 + (P("data", "model", None, None),),
      out_specs=(BTNH,),
      bwd_all_reduce=False,
    ),
    **COMMON,
  )
