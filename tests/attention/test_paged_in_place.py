"""paged_attention's in-place kernels (the pool read through the block
tables, no gathered copy) against the gathered "xla" oracle: every float
dtype on the CPU kernel, gradients, sinks, vmap over a pool per element,
edge contexts and table entries, batch/head sharding; and on a GPU the
CUDA decode kernel in place (head dims 64/128/256, block sizes 16-256, GQA)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_cases import assert_close, hlo, tol
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxdnn

ON_GPU = jax.default_backend() == "gpu"
PAGED = 'custom_call_target="jaxdnn_paged_attention_fwd"'
GATHERED = 'custom_call_target="jaxdnn_attention_fwd"'
KERNEL = "cuda" if ON_GPU else "cpu"


def _inputs(seed, batch, q_len, heads, kv_heads, dim, block, max_blocks, pool, lengths, dtype):
  rng = np.random.default_rng(seed)
  q = rng.standard_normal((batch, q_len, heads, dim))
  kc = rng.standard_normal((pool, block, kv_heads, dim))
  vc = rng.standard_normal((pool, block, kv_heads, dim))
  tables = rng.integers(0, pool, (batch, max_blocks)).astype(np.int32)  # shared blocks allowed
  return (
    jnp.asarray(q, dtype),
    jnp.asarray(kc, dtype),
    jnp.asarray(vc, dtype),
    jnp.asarray(tables),
    jnp.asarray(lengths, jnp.int32),
  )


def _both(args, **kw):
  got = jax.jit(lambda *a: jaxdnn.paged_attention(*a, implementation=KERNEL, **kw))(*args)
  want = jax.jit(lambda *a: jaxdnn.paged_attention(*a, implementation="xla", **kw))(*args)
  return got, want


DTYPES = [jnp.bfloat16, jnp.float16] + ([] if ON_GPU else [jnp.float32])
# (batch, q_len, heads, kv_heads, head_dim, block, max_blocks, pool, lengths)
SHAPES = {
  "decode_gqa4": (3, 1, 8, 2, 64, 16, 6, 20, [1, 50, 96]),
  "decode3_mqa": (2, 3, 4, 1, 64, 64, 3, 7, [130, 3]),
  "decode16_gqa8": (2, 16, 16, 2, 128, 32, 5, 12, [160, 17]),
  "block256_d256": (1, 2, 2, 2, 256, 256, 2, 3, [400]),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("name", list(SHAPES))
def test_in_place_matches_the_gathered_oracle(name, dtype):
  args = _inputs(len(name), *SHAPES[name], dtype)
  got, want = _both(args)
  assert got.dtype == dtype
  assert_close(got, want, tol(dtype))
  assert PAGED in hlo(lambda *a: jaxdnn.paged_attention(*a), *args)


def test_edge_contexts_and_table_entries():
  """Contexts of 0 (zeros), past the tables' span (the span), negative (0);
  table entries out of the pool (clamped, as the gather's clip)."""
  q, kc, vc, tables, _ = _inputs(3, 4, 2, 4, 2, 64, 16, 3, 5, [1, 1, 1, 1], jnp.bfloat16)
  tables = tables.at[1, 0].set(-3).at[2, 2].set(99)
  lengths = jnp.asarray([0, 40, 1000, -5], jnp.int32)
  got, want = _both((q, kc, vc, tables, lengths))
  assert_close(got, want, tol(jnp.bfloat16))
  assert not np.asarray(got[0]).any() and not np.asarray(got[3]).any()


def test_window_softcap_scale_and_sinks():
  args = _inputs(4, 2, 4, 8, 2, 64, 16, 8, 12, [100, 9], jnp.bfloat16)
  sinks = jnp.asarray(np.linspace(-1, 2, 8), jnp.float32)
  got, want = _both(args, local_window_size=(20, 0), softcap=5.0, scale=0.1, sinks=sinks)
  assert_close(got, want, tol(jnp.bfloat16))


def test_stale_nan_past_the_context_is_never_read():
  q, kc, vc, tables, lengths = _inputs(5, 2, 1, 4, 2, 64, 16, 4, 8, [20, 33], jnp.float16)
  tables = jnp.asarray([[0, 1, 2, 3], [4, 5, 6, 7]], jnp.int32)
  kc = kc.at[1, 4:].set(jnp.nan).at[2:4].set(jnp.nan).at[6, 1:].set(jnp.inf).at[7].set(jnp.inf)
  vc = vc.at[1, 4:].set(jnp.nan).at[2:4].set(jnp.nan).at[6, 1:].set(jnp.nan)
  got, want = _both((q, kc, vc, tables, lengths))
  assert np.isfinite(np.asarray(got, np.float32)).all()
  assert_close(got, want, tol(jnp.float16))


def test_gradients_of_query_caches_and_sinks():
  dtype = jnp.bfloat16 if ON_GPU else jnp.float32
  q, kc, vc, tables, lengths = _inputs(6, 2, 2, 4, 2, 64, 16, 3, 5, [30, 7], dtype)
  sinks = jnp.asarray([0.5, -1.0, 0.0, 2.0], jnp.float32)

  def loss(impl):
    def f(q, kc, vc, sinks):
      out = jaxdnn.paged_attention(q, kc, vc, tables, lengths, sinks=sinks, implementation=impl)
      return jnp.sum(out.astype(jnp.float32) * jnp.cos(jnp.arange(out.size).reshape(out.shape)))

    return jax.jit(jax.grad(f, argnums=(0, 1, 2, 3)))(q, kc, vc, sinks)

  for got, want in zip(loss(KERNEL), loss("xla")):
    assert_close(got, want, 4 * tol(dtype))


def test_vmap_with_a_pool_per_element():
  q, kc, vc, tables, lengths = _inputs(7, 2, 1, 4, 2, 64, 16, 3, 6, [40, 12], jnp.bfloat16)
  kcs, vcs = jnp.stack([kc, -kc]), jnp.stack([vc, 2 * vc])
  tabs = jnp.stack([tables, tables[::-1]])

  def f(kc, vc, tables):
    return jaxdnn.paged_attention(q, kc, vc, tables, lengths, implementation=KERNEL)

  got = jax.jit(jax.vmap(f))(kcs, vcs, tabs)
  for i in range(2):
    assert_close(got[i], f(kcs[i], vcs[i], tabs[i]), tol(jnp.bfloat16))


@pytest.mark.skipif(len(jax.devices()) < 4, reason="needs 4 devices")
@pytest.mark.parametrize("layout", ["batch", "heads"])
def test_sharded_over_batch_or_heads_moves_nothing(layout):
  q, kc, vc, tables, lengths = _inputs(8, 4, 2, 8, 4, 64, 16, 4, 10, [5, 64, 33, 17], jnp.bfloat16)
  mesh = jax.make_mesh((4,), ("x",))
  b, h = ("x", None) if layout == "batch" else (None, "x")
  put = lambda a, *spec: jax.device_put(a, NamedSharding(mesh, P(*spec)))
  args = (
    put(q, b, None, h, None),
    put(kc, None, None, h, None),
    put(vc, None, None, h, None),
    put(tables, b, None),
    put(lengths, b),
  )
  f = jax.jit(lambda *a: jaxdnn.paged_attention(*a, implementation=KERNEL))
  text = f.lower(*args).compile().as_text()
  assert PAGED in text
  for move in ("all-gather", "all-to-all", "collective-permute"):
    assert move not in text
  assert_close(
    f(*args), jaxdnn.paged_attention(q, kc, vc, tables, lengths, implementation="xla"), 0.02
  )


def test_a_long_chunk_on_cuda_is_gathered():
  """On CUDA more than 16 query tokens (or another head dim) go through the
  gathered path; the CPU kernel reads the pool in place at any length."""
  args = _inputs(9, 1, 20, 4, 4, 64, 16, 4, 6, [60], jnp.bfloat16)
  text = hlo(lambda *a: jaxdnn.paged_attention(*a), *args)
  assert (GATHERED if ON_GPU else PAGED) in text
  got, want = _both(args)
  assert_close(got, want, tol(jnp.bfloat16))


@pytest.mark.skipif(not ON_GPU, reason="needs a GPU")
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("block", [16, 64, 256])
def test_cuda_decode_in_place(dim, block):
  span = 4096
  args = _inputs(
    dim + block,
    4,
    1,
    32,
    4,
    dim,
    block,
    span // block,
    3 * span // block,
    [1, 999, 4096, 2049],
    jnp.bfloat16,
  )
  assert PAGED in hlo(lambda *a: jaxdnn.paged_attention(*a), *args)
  got, want = _both(args)
  assert_close(got, want, tol(jnp.bfloat16))
