"""jaxdnn.flax.attention_fn inside Flax's own multi-head attention layers
(linen and nnx), against the same layers with Flax's attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdnn

flax = pytest.importorskip("flax")
from flax import linen, nnx  # noqa: E402


@pytest.fixture(autouse=True)
def _full_float32_products():
  # On a GPU XLA's float32 matmuls default to TF32 (~1e-3 off); both layers
  # then differ by that, not by the attention under test.
  with jax.default_matmul_precision("highest"):
    yield


def _inputs(batch=(2,), q_len=7, kv_len=9, features=32):
  keys = jax.random.split(jax.random.key(7), 2)
  q = jax.random.normal(keys[0], batch + (q_len, features))
  kv = jax.random.normal(keys[1], batch + (kv_len, features))
  return q, kv


@pytest.mark.parametrize("batch", [(2,), (2, 3)], ids=["batch", "two-batch-dims"])
@pytest.mark.parametrize("masked", [False, True])
def test_linen_multi_head_attention(batch, masked):
  q, kv = _inputs(batch)
  mask = None
  if masked:  # Flax's float32 masks (1 = attend), with every query keeping a key
    valid = jnp.arange(kv.shape[-2]) < kv.shape[-2] - 2
    mask = linen.make_attention_mask(jnp.ones(q.shape[:-1]), jnp.broadcast_to(valid, kv.shape[:-1]))
  ref = linen.MultiHeadDotProductAttention(num_heads=4, qkv_features=32)
  ours = linen.MultiHeadDotProductAttention(
    num_heads=4, qkv_features=32, attention_fn=jaxdnn.flax.attention_fn
  )
  params = ref.init(jax.random.key(0), q, kv, mask=mask)
  want = ref.apply(params, q, kv, mask=mask)
  got = jax.jit(lambda p, q, kv: ours.apply(p, q, kv, mask=mask))(params, q, kv)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)
  # Gradients through the layer match too.
  loss = lambda m: lambda p: jnp.sum(jnp.sin(m.apply(p, q, kv, mask=mask)))
  g_want = jax.grad(loss(ref))(params)
  g_got = jax.jit(jax.grad(loss(ours)))(params)
  for a, b in zip(jax.tree.leaves(g_got), jax.tree.leaves(g_want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_nnx_multi_head_attention(causal):
  q, _ = _inputs(q_len=9)
  kw = dict(num_heads=4, in_features=32, qkv_features=32, decode=False)
  ref = nnx.MultiHeadAttention(**kw, rngs=nnx.Rngs(0))  # the same parameters in both
  ours = nnx.MultiHeadAttention(**kw, rngs=nnx.Rngs(0), attention_fn=jaxdnn.flax.attention_fn)
  mask = nnx.make_causal_mask(jnp.ones(q.shape[:-1])) if causal else None
  want = ref(q, mask=mask, deterministic=True)
  got = ours(q, mask=mask, deterministic=True)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)


def test_dropout_follows_flax_deterministic():
  q, kv = _inputs()
  layer = linen.MultiHeadDotProductAttention(
    num_heads=4, qkv_features=32, dropout_rate=0.5, attention_fn=jaxdnn.flax.attention_fn
  )
  params = layer.init(jax.random.key(0), q, kv, deterministic=True)
  quiet = layer.apply(params, q, kv, deterministic=True)
  again = layer.apply(params, q, kv, deterministic=True)
  np.testing.assert_array_equal(np.asarray(quiet), np.asarray(again))
  noisy = layer.apply(params, q, kv, deterministic=False, rngs={"dropout": jax.random.key(1)})
  assert not np.allclose(np.asarray(noisy), np.asarray(quiet))


def test_sow_weights_is_refused_clearly():
  q, kv = _inputs()
  layer = linen.MultiHeadDotProductAttention(
    num_heads=4, qkv_features=32, attention_fn=jaxdnn.flax.attention_fn
  )
  params = layer.init(jax.random.key(0), q, kv)
  with pytest.raises(NotImplementedError, match="sow_weights"):
    layer.apply(params, q, kv, sow_weights=True, mutable=["intermediates"])
