"""Shared inputs, option sets and tolerances for the attention tests.

Every test compares the kernel (implementation None or "cpu"; "cuda" on a GPU)
with implementation="xla", the plain-JAX oracle of jaxdnn/attention/reference.py.
Arrays are passed as jit arguments (never closed over) so nothing is constant
folded, and the oracle is jitted too.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn

DTYPES = [jnp.float32, jnp.bfloat16, jnp.float16]
FWD_TARGET = 'custom_call_target="jaxdnn_attention_fwd"'
BWD_TARGET = 'custom_call_target="jaxdnn_attention_bwd"'

# The oracle is compiled with less optimisation: the same arithmetic, half the
# compile time (which dominates these small cases). The kernels compile as usual.
ORACLE_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}

_counter = [0]


def key():
  _counter[0] += 1
  return jax.random.key(7000 + _counter[0] + np.random.randint(1 << 20))


@functools.partial(jax.jit, static_argnums=1)
def _normal(k, n):
  return jax.random.normal(k, (n,), jnp.float32)


@functools.partial(jax.jit, static_argnums=1)
def _uniform(k, n):
  return jax.random.uniform(k, (n,), jnp.float32)


def _bucket(n):
  return max(1024, 1 << (max(n, 1) - 1).bit_length())


def _draw(gen, shape):
  """Fresh jax.random draws of `shape` (one compiled generator per size bucket)."""
  n = int(np.prod(shape, dtype=np.int64))
  return np.asarray(gen(key(), _bucket(n)))[:n].reshape(shape)


def rand(shape, dtype=jnp.float32, scale=1.0, offset=0.0):
  x = _draw(_normal, shape) * np.float32(scale) + np.float32(offset)
  return jnp.asarray(x.astype(jnp.dtype(dtype)))


def bernoulli(p, shape):
  return jnp.asarray(_draw(_uniform, shape) < p)


def randint(lo, hi, shape):
  """Integers in [lo, hi)."""
  return lo + np.minimum((_draw(_uniform, shape) * (hi - lo)).astype(np.int32), hi - lo - 1)


def dtype_name(d):
  return jnp.dtype(d).name


def tol(dtype):
  return {jnp.float32: 2e-5, jnp.bfloat16: 2e-2, jnp.float16: 5e-3}[jnp.dtype(dtype).type]


def grad_tol(dtype):
  return {jnp.float32: 1e-4, jnp.bfloat16: 6e-2, jnp.float16: 1.5e-2}[jnp.dtype(dtype).type]


def assert_close(a, b, rtol, atol=None, err_msg=""):
  a = np.asarray(jnp.asarray(a, jnp.float32))
  b = np.asarray(jnp.asarray(b, jnp.float32))
  assert a.shape == b.shape, (a.shape, b.shape)
  finite = b[np.isfinite(b)]
  scale = max(1.0, float(np.max(np.abs(finite))) if finite.size else 1.0)
  np.testing.assert_allclose(
    a, b, rtol=rtol, atol=(atol if atol is not None else rtol * scale), err_msg=err_msg
  )


@dataclass(frozen=True)
class Dims:
  """[batch, q_len, heads, head_dim] queries, [batch, kv_len, kv_heads, head_dim] keys."""

  batch: int
  q_len: int
  kv_len: int
  heads: int
  kv_heads: int
  head_dim: int

  def __str__(self):
    return (
      f"B{self.batch}-T{self.q_len}-S{self.kv_len}-N{self.heads}-K{self.kv_heads}-H{self.head_dim}"
    )


def qkv(d: Dims, dtype=jnp.float32, scale=1.0):
  q = rand((d.batch, d.q_len, d.heads, d.head_dim), dtype, scale)
  k = rand((d.batch, d.kv_len, d.kv_heads, d.head_dim), dtype, scale)
  v = rand((d.batch, d.kv_len, d.kv_heads, d.head_dim), dtype)
  return q, k, v


def split_kwargs(kw):
  """(array kwargs, static kwargs): arrays become jit arguments."""
  arrays = {n: x for n, x in kw.items() if isinstance(x, jax.Array)}
  static = {n: x for n, x in kw.items() if n not in arrays}
  return arrays, static


def jit(f, impl):
  """jax.jit, with the oracle's faster-compiling options when impl == "xla"."""
  return jax.jit(f, compiler_options=ORACLE_COMPILER_OPTIONS if impl == "xla" else None)


def attention_fn(impl, static):
  """f(q, k, v, arrays) -> dot_product_attention's result."""

  def f(q, k, v, arrays):
    return jaxdnn.dot_product_attention(q, k, v, implementation=impl, **static, **arrays)

  return f


def run(impl, q, k, v, **kw):
  arrays, static = split_kwargs(kw)
  return jit(attention_fn(impl, static), impl)(q, k, v, arrays)


def cotangent_like(x):
  return rand(x.shape, jnp.float32)


def loss_fn(impl, static, w_out, w_lse=None):
  """Scalar loss of (q, k, v, bias, arrays): a random projection of the output
  (and of the finite log-sum-exp entries when w_lse is given). bias may be None."""

  def loss(q, k, v, bias, arrays):
    if bias is not None:
      arrays = dict(arrays, bias=bias)
    res = jaxdnn.dot_product_attention(
      q, k, v, implementation=impl, return_logsumexp=w_lse is not None, **static, **arrays
    )
    out, lse = res if w_lse is not None else (res, None)
    total = jnp.sum(out.astype(jnp.float32) * w_out)
    if lse is not None:
      total += jnp.sum(jnp.where(jnp.isfinite(lse), lse * w_lse, 0.0))
    return total

  return loss


def grads(impl, q, k, v, kw, w_out, w_lse=None):
  """d loss / d (q, k, v[, bias]) under jit."""
  kw = dict(kw)
  bias = kw.pop("bias", None)
  arrays, static = split_kwargs(kw)
  argnums = (0, 1, 2, 3) if bias is not None else (0, 1, 2)
  g = jit(jax.grad(loss_fn(impl, static, w_out, w_lse), argnums=argnums), impl)
  return g(q, k, v, bias, arrays)


def hlo(f, *args):
  return jax.jit(f).lower(*args).compile().as_text()


# q_len / kv_len from {1, 7, 33, 100}, both orders; head dims 40..256; GQA 1, 4, 8.
SHAPES = [
  Dims(2, 1, 1, 2, 2, 64),
  Dims(2, 7, 7, 4, 4, 64),
  Dims(2, 33, 33, 8, 2, 64),  # GQA 4
  Dims(1, 100, 100, 8, 1, 64),  # MQA (8)
  Dims(2, 7, 33, 4, 1, 96),  # q shorter than kv
  Dims(2, 33, 7, 4, 2, 128),  # q longer than kv
  Dims(1, 1, 100, 8, 8, 128),  # decode step
  Dims(2, 100, 1, 2, 1, 40),  # a single key
  Dims(1, 33, 100, 2, 2, 192),
  Dims(1, 100, 33, 2, 1, 256),
  Dims(2, 33, 33, 2, 2, 40),
  Dims(1, 7, 100, 8, 1, 256),
]


# ---- options: each a function of Dims returning dot_product_attention kwargs ----


def segment_ids(batch, length, docs=3):
  """Packed documents: non-decreasing ids, a new document at random positions."""
  starts = np.asarray(bernoulli(docs / max(length, 1), (batch, length)))
  return jnp.asarray(np.cumsum(starts, axis=1, dtype=np.int32))


def lengths(batch, n):
  """Random valid lengths in [1, n], the first row full."""
  x = randint(1, n + 1, (batch,))
  x[0] = n
  return jnp.asarray(x)


def bias_of(d: Dims, shape_kind):
  full = {"B": d.batch, "N": d.heads, "T": d.q_len, "S": d.kv_len}
  if shape_kind == "TS":  # rank 2: jax.nn-style leading 1s
    return rand((d.q_len, d.kv_len), scale=0.5)
  return rand(tuple(full[c] if c in full else 1 for c in shape_kind), scale=0.5)


def mask_of(d: Dims, shape_kind, p=0.8):
  full = {"B": d.batch, "N": d.heads, "T": d.q_len, "S": d.kv_len}
  shape = tuple(full[c] if c in full else 1 for c in shape_kind)
  return bernoulli(p, shape)


OPTIONS = {
  "plain": lambda d: {},
  "causal": lambda d: dict(is_causal=True),
  "window_int": lambda d: dict(local_window_size=5),
  "window_left": lambda d: dict(local_window_size=(3, 0)),
  "window_right": lambda d: dict(local_window_size=(0, 4)),
  "window_pair": lambda d: dict(local_window_size=(10, 2)),
  "causal_window": lambda d: dict(is_causal=True, local_window_size=(8, 8)),
  "q_lengths": lambda d: dict(query_seq_lengths=lengths(d.batch, d.q_len)),
  "kv_lengths": lambda d: dict(key_value_seq_lengths=lengths(d.batch, d.kv_len)),
  "both_lengths": lambda d: dict(
    query_seq_lengths=lengths(d.batch, d.q_len), key_value_seq_lengths=lengths(d.batch, d.kv_len)
  ),
  "segments": lambda d: dict(
    query_segment_ids=segment_ids(d.batch, d.q_len),
    key_value_segment_ids=segment_ids(d.batch, d.kv_len),
  ),
  "bias_full": lambda d: dict(bias=bias_of(d, "BNTS")),
  "bias_1NTS": lambda d: dict(bias=bias_of(d, "1NTS")),
  "bias_B1TS": lambda d: dict(bias=bias_of(d, "B1TS")),
  "bias_111S": lambda d: dict(bias=bias_of(d, "111S")),
  "bias_B11S": lambda d: dict(bias=bias_of(d, "B11S")),
  "bias_rank2": lambda d: dict(bias=bias_of(d, "TS")),
  "mask_full": lambda d: dict(mask=mask_of(d, "BNTS")),
  "mask_B1TS": lambda d: dict(mask=mask_of(d, "B1TS")),
  "mask_111S": lambda d: dict(mask=mask_of(d, "111S")),
  "softcap": lambda d: dict(softcap=2.0),
  "scale": lambda d: dict(scale=0.37),
  # Combinations that meet in one kernel loop.
  "causal_segments_kvlen": lambda d: dict(
    is_causal=True,
    query_segment_ids=segment_ids(d.batch, d.q_len),
    key_value_segment_ids=segment_ids(d.batch, d.kv_len),
    key_value_seq_lengths=lengths(d.batch, d.kv_len),
  ),
  "bias_mask_softcap": lambda d: dict(
    bias=bias_of(d, "1NTS"), mask=mask_of(d, "B1TS"), softcap=3.0
  ),
  "window_lengths_bias": lambda d: dict(
    local_window_size=(6, 3),
    query_seq_lengths=lengths(d.batch, d.q_len),
    key_value_seq_lengths=lengths(d.batch, d.kv_len),
    bias=bias_of(d, "B1TS"),
  ),
  "causal_softcap_bias": lambda d: dict(is_causal=True, softcap=4.0, bias=bias_of(d, "1N1S")),
  "everything": lambda d: dict(
    is_causal=True,
    local_window_size=(20, 0),
    bias=bias_of(d, "BNTS"),
    mask=mask_of(d, "1NTS", 0.9),
    query_seq_lengths=lengths(d.batch, d.q_len),
    key_value_seq_lengths=lengths(d.batch, d.kv_len),
    query_segment_ids=segment_ids(d.batch, d.q_len),
    key_value_segment_ids=segment_ids(d.batch, d.kv_len),
    softcap=5.0,
    scale=0.2,
  ),
}


def context_parallel_and_whole(mesh, kw, use_segments, implementation=None):
  """(cp, whole): attention with the sequence split over the mesh's "seq" axis
  (shard_map of dot_product_attention_context_parallel) and the same call on
  the whole sequence; both take (q, k, v, segment_ids)."""
  from jax.sharding import PartitionSpec as P

  def segments(s):
    return dict(query_segment_ids=s, key_value_segment_ids=s) if use_segments else {}

  def local(q, k, v, s):
    return jaxdnn.dot_product_attention_context_parallel(
      q, k, v, axis_name="seq", **kw, **segments(s)
    )

  cp = jax.shard_map(local, mesh=mesh, in_specs=(P(None, "seq"),) * 4, out_specs=P(None, "seq"))

  def whole(q, k, v, s):
    return jaxdnn.dot_product_attention(q, k, v, implementation=implementation, **kw, **segments(s))

  return cp, whole
