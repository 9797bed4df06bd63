"""Bad dot_product_attention arguments fail at trace time with a ValueError naming the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_cases import bernoulli, rand

import jaxdnn
from jaxdnn import _extension

B, T, S, N, K, H = 2, 7, 9, 4, 2, 16


def _qkv(dtype=jnp.float32):
  return rand((B, T, N, H), dtype), rand((B, S, K, H), dtype), rand((B, S, K, H), dtype)


def _bad(match, *args, **kw):
  q, k, v = _qkv()
  args = args or (q, k, v)
  with pytest.raises(ValueError, match=match):
    jaxdnn.dot_product_attention(*args, **kw)
  # Under jit too: the checks run at trace time.
  with pytest.raises(ValueError, match=match):
    jax.jit(lambda *a: jaxdnn.dot_product_attention(*a, **kw))(*args)


def test_query_key_shapes():
  q, k, v = _qkv()
  _bad(r"query batch 2 != key batch 3", q, rand((3, S, K, H)), rand((3, S, K, H)))
  _bad(r"query head_dim 16 != key head_dim 8", q, rand((B, S, K, 8)), rand((B, S, K, 8)))
  _bad(r"value must have key's shape", q, k, rand((B, S + 1, K, H)))
  _bad(r"value's head_dim \(its last axis\) must be at least 1", q, k, rand((B, S, K, 0)))
  _bad(r"query, key and value must have the same rank", q, k[0], v[0])
  _bad(r"query must be \[batch, seq, heads, head_dim\]", q[0, 0], k, v)
  _bad(r"key must be \[batch, seq, heads, head_dim\]", q, rand((1,) + k.shape), v)


def test_dtypes():
  q, k, v = _qkv()
  _bad(r"query, key and value must share a dtype", q, k.astype(jnp.bfloat16), v)
  _bad(r"query, key and value must share a dtype", q, k, v.astype(jnp.float16))
  _bad(r"query must be float32, bfloat16 or float16", q.astype(jnp.int32), k, v)


def test_heads_and_head_dim():
  _bad(
    r"key/value heads \(3\) must divide query heads \(4\)",
    rand((B, T, N, H)),
    rand((B, S, 3, H)),
    rand((B, S, 3, H)),
  )
  big = 264
  _bad(
    r"implementation='cpu' has no kernel for head_dim 264 > 256",
    rand((B, T, N, big)),
    rand((B, S, K, big)),
    rand((B, S, K, big)),
    implementation="cpu",
  )
  _bad(
    r"head_dim \(the last axis of query, key and value\) must be at least 1",
    rand((B, T, N, 0)),
    rand((B, S, K, 0)),
    rand((B, S, K, 0)),
  )


def test_uncovered_calls_run_on_xla_with_one_warning():
  # Head dims over 256 (and float64 inputs) have no kernel: implementation=None
  # serves them through the XLA composition, warning once per call.
  q, k, v = rand((B, T, N, 264)), rand((B, S, K, 264)), rand((B, S, K, 264))
  with pytest.warns(UserWarning, match="no jaxdnn kernel for head_dim 264") as record:
    got = jaxdnn.dot_product_attention(q, k, v)
  assert len(record) == 1
  want = jaxdnn.dot_product_attention(q, k, v, implementation="xla")
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_window():
  _bad(r"local_window_size sides must be >= 0", local_window_size=(-1, 3))
  _bad(r"local_window_size sides must be >= 0", local_window_size=(3, -2))
  _bad(r"local_window_size sides must be >= 0", local_window_size=-1)
  _bad(r"local_window_size must be an int or a \(left, right\) pair", local_window_size="wide")
  _bad(r"local_window_size must be an int or a \(left, right\) pair", local_window_size=(1, 2, 3))


def test_segment_ids():
  qs, ks = jnp.zeros((B, T), jnp.int32), jnp.zeros((B, S), jnp.int32)
  _bad(r"query_segment_ids and key_value_segment_ids must be given together", query_segment_ids=qs)
  _bad(
    r"query_segment_ids and key_value_segment_ids must be given together", key_value_segment_ids=ks
  )
  _bad(
    r"query_segment_ids must be an integer array of shape \(2, 7\)",
    query_segment_ids=jnp.zeros((B, T + 1), jnp.int32),
    key_value_segment_ids=ks,
  )
  _bad(
    r"key_value_segment_ids must be an integer array of shape \(2, 9\)",
    query_segment_ids=qs,
    key_value_segment_ids=jnp.zeros((B, T), jnp.int32),
  )
  _bad(
    r"query_segment_ids must be an integer array",
    query_segment_ids=qs.astype(jnp.float32),
    key_value_segment_ids=ks,
  )


def test_dropout_and_softcap_and_scale():
  _bad(r"dropout_rate > 0 needs a dropout_rng", dropout_rate=0.1)
  _bad(r"dropout_rate must be in \[0, 1\)", dropout_rate=1.0, dropout_rng=jax.random.key(0))
  _bad(r"dropout_rate must be in \[0, 1\)", dropout_rate=1.5, dropout_rng=jax.random.key(0))
  _bad(r"dropout_rate must be in \[0, 1\)", dropout_rate=-0.1, dropout_rng=jax.random.key(0))
  _bad(r"softcap must be > 0", softcap=0.0)
  _bad(r"softcap must be > 0", softcap=-3.0)
  _bad(r"scale must be a finite float32 number", scale=float("nan"))
  _bad(r"scale must be a finite float32 number", scale=float("inf"))
  _bad(r"scale must be a finite float32 number", scale=1e39)  # finite only in float64
  _bad(r"softcap must be > 0 and a normal finite float32 number", softcap=float("inf"))
  _bad(r"softcap must be > 0 and a normal finite float32 number", softcap=1e-46)  # 0 in float32
  _bad(
    r"dropout_rate must be in \[0, 1\) \(also once rounded to float32\)",
    dropout_rate=0.99999999,
    dropout_rng=jax.random.key(0),
  )  # 1.0 in float32


def test_flags_and_non_arrays():
  _bad(
    r"local_window_size must be an int or a \(left, right\) pair of ints", local_window_size=True
  )
  _bad(
    r"local_window_size must be an int or a \(left, right\) pair of ints",
    local_window_size=(1.5, 2),
  )
  q, k, v = _qkv()
  with pytest.raises(ValueError, match=r"is_causal must be a Python bool"):
    jax.jit(lambda c: jaxdnn.dot_product_attention(q, k, v, is_causal=c))(True)
  for name, args in (("query", (None, k, v)), ("key", (q, "k", v)), ("value", (q, k, {}))):
    with pytest.raises(TypeError, match=f"{name} must be an array"):
      jaxdnn.dot_product_attention(*args)


def test_bias_and_mask():
  _bad(
    r"bias must be 4-D and broadcastable to \[batch, heads, q_len, kv_len\]",
    bias=rand((B, N, T, S + 1)),
  )
  _bad(r"bias must be 4-D and broadcastable", bias=rand((3, N, T, S)))
  _bad(r"bias must be 4-D and broadcastable", bias=rand((B, 2, T, S)))
  _bad(r"bias must be 4-D and broadcastable", bias=rand((1, B, N, T, S)))
  _bad(r"bias must be a floating array", bias=jnp.ones((B, N, T, S), jnp.int32))
  _bad(r"mask must be a bool array", mask=jnp.ones((B, N, T, S), jnp.int32))
  _bad(r"mask must be a bool array", mask=rand((B, N, T, S)))
  _bad(r"mask must be 4-D and broadcastable", mask=bernoulli(0.5, (B, N, T + 1, S)))


def test_lengths():
  _bad(
    r"query_seq_lengths must be an integer array of shape \(2,\)",
    query_seq_lengths=jnp.array([7, 7, 7], jnp.int32),
  )
  _bad(
    r"query_seq_lengths must be an integer array of shape \(2,\)",
    query_seq_lengths=jnp.array([[7], [7]], jnp.int32),
  )
  _bad(
    r"key_value_seq_lengths must be an integer array of shape \(2,\)",
    key_value_seq_lengths=jnp.array([9.0, 9.0]),
  )


def test_unknown_implementation():
  _bad(
    r"implementation must be one of None, 'cuda', 'cpu' or 'xla', got 'triton'",
    implementation="triton",
  )
  # "cudnn" is jax.nn's name for the fused GPU kernel: jaxdnn's CUDA kernel.
  _bad(r"implementation='cuda'", implementation="cudnn")


def test_cuda_without_gpu_is_refused():
  if jax.default_backend() != "cpu":
    pytest.skip("CPU-only check")
  q, k, v = _qkv(jnp.bfloat16)
  # Either the build has no CUDA extension, or the lowering refuses the CPU platform.
  match = r"implementation='cuda' (was asked for|cannot)|cannot run on platform 'cpu'"
  with pytest.raises(ValueError, match=match):
    jax.jit(lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, implementation="cuda"))(q, k, v)
  if not _extension.has_cuda_kernels():
    with pytest.raises(ValueError, match="without its CUDA extension"):
      jaxdnn.dot_product_attention(q, k, v, implementation="cuda")


def test_cpu_kernel_on_cpu_only():
  # implementation="cpu" lowered for another platform is refused, not silently swapped.
  if jax.default_backend() != "gpu":
    pytest.skip("needs a GPU to lower for a non-CPU platform")
  q, k, v = _qkv()
  with pytest.raises(ValueError, match="cannot run on platform"):
    jax.jit(lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, implementation="cpu"))(q, k, v)


def test_valid_edge_arguments_are_accepted():
  # The boundaries of the checks: a window of 0 on both sides, head_dim 256,
  # dropout_rate 0 without a key, int and numpy-int windows.
  q, k, v = _qkv()
  for kw in (
    dict(local_window_size=0),
    dict(local_window_size=np.int64(2)),
    dict(local_window_size=(0, 0)),
    dict(dropout_rate=0.0),
    dict(softcap=1e-3),
  ):
    out = jaxdnn.dot_product_attention(q, k, v, **kw)
    assert out.shape == q.shape and np.all(np.isfinite(np.asarray(out)))
  q256 = rand((1, 3, 2, 256))
  assert jaxdnn.dot_product_attention(q256, q256, q256).shape == q256.shape


def test_traced_scale_is_refused_with_a_clear_error():
  q = jnp.ones((1, 4, 2, 16))
  f = jax.jit(lambda q, s: jaxdnn.dot_product_attention(q, q, q, scale=s))
  with pytest.raises(ValueError, match="scale must be a Python number"):
    f(q, 0.5)
