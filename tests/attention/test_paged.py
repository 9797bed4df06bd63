"""paged_attention against a float64 numpy oracle that walks each sequence's
block table: decode and chunked prefill, GQA, block sizes, stale (even NaN)
blocks past the context, window and softcap; jit, vmap and the kernel's
custom call; bad arguments named."""

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_cases import FWD_TARGET, assert_close, hlo, tol

import jaxdnn

ON_GPU = jax.default_backend() == "gpu"
PAGED_TARGET = 'custom_call_target="jaxdnn_paged_attention_fwd"'
KERNELS = [None] + ([] if ON_GPU else ["cpu"]) + ["xla"]
DTYPE = jnp.bfloat16 if ON_GPU else jnp.float32


def _case(rng, batch, q_len, heads, kv_heads, dim, block, max_blocks, pool, lengths):
  q = rng.standard_normal((batch, q_len, heads, dim)).astype(np.float32)
  kc = rng.standard_normal((pool, block, kv_heads, dim)).astype(np.float32)
  vc = rng.standard_normal((pool, block, kv_heads, dim)).astype(np.float32)
  # Disjoint tables (a block poisoned past one context is no other's).
  tables = rng.permutation(pool)[: batch * max_blocks].reshape(batch, max_blocks).astype(np.int32)
  return q, kc, vc, tables, np.asarray(lengths, np.int32)


def _oracle(q, kc, vc, tables, lengths, scale, window=None, softcap=None):
  batch, q_len, heads, dim = q.shape
  group = heads // kc.shape[2]
  out = np.zeros(q.shape, np.float64)
  for b in range(batch):
    n = int(lengths[b])
    k = np.concatenate([kc[t] for t in tables[b]])[:n].astype(np.float64)
    v = np.concatenate([vc[t] for t in tables[b]])[:n].astype(np.float64)
    for i in range(q_len):
      pos = n - q_len + i  # this query's position in its sequence
      keys = np.arange(n)
      ok = keys <= pos
      if window is not None:
        ok &= keys >= pos - window
      for h in range(heads):
        if not ok.any():
          continue
        s = k[:, h // group] @ q[b, i, h].astype(np.float64) * scale
        if softcap:
          s = softcap * np.tanh(s / softcap)
        s = np.where(ok, s, -np.inf)
        p = np.exp(s - s.max())
        out[b, i, h] = (p / p.sum()) @ v[:, h // group]
  return out


# (batch, q_len, heads, kv_heads, head_dim, block, max_blocks, pool, context lengths)
CASES = {
  "decode": (3, 1, 8, 2, 32, 16, 4, 12, [1, 37, 64]),
  "decode4_gqa8": (2, 4, 8, 1, 64, 64, 2, 5, [70, 128]),
  "prefill_chunk": (2, 16, 4, 4, 32, 16, 5, 10, [16, 75]),
  "block_256": (1, 2, 2, 2, 16, 256, 2, 3, [300]),
}


@pytest.mark.parametrize("impl", KERNELS, ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_matches_the_block_table_oracle(impl, name):
  rng = np.random.default_rng(zlib.crc32(name.encode()))
  q, kc, vc, tables, lengths = _case(rng, *CASES[name])
  # Stale blocks past every context, NaN included: never read.
  for b in range(len(lengths)):
    tail = np.arange(tables.shape[1] * kc.shape[1]) >= lengths[b]
    flat = tail.reshape(tables.shape[1], kc.shape[1])
    for j, t in enumerate(tables[b]):
      kc[t][flat[j]] = np.nan if b == 0 else kc[t][flat[j]]
  want = _oracle(q, kc, vc, tables, lengths, 1 / np.sqrt(q.shape[-1]))
  assert np.isfinite(want).all()
  f = jax.jit(lambda *a: jaxdnn.paged_attention(*a, implementation=impl))
  got = f(*(jnp.asarray(x, DTYPE) for x in (q, kc, vc)), jnp.asarray(tables), jnp.asarray(lengths))
  assert got.shape == q.shape and got.dtype == DTYPE
  assert_close(got, want, tol(DTYPE) * (4 if DTYPE != jnp.float32 else 1))


def test_window_softcap_and_the_kernel_in_the_hlo():
  rng = np.random.default_rng(5)
  q, kc, vc, tables, lengths = _case(rng, *CASES["prefill_chunk"])
  want = _oracle(q, kc, vc, tables, lengths, 0.2, window=9, softcap=3.0)
  args = (*(jnp.asarray(x, DTYPE) for x in (q, kc, vc)), jnp.asarray(tables), jnp.asarray(lengths))
  f = lambda *a: jaxdnn.paged_attention(*a, scale=0.2, local_window_size=(9, 0), softcap=3.0)
  assert_close(jax.jit(f)(*args), want, tol(DTYPE) * (4 if DTYPE != jnp.float32 else 1))
  # The CPU kernel reads the pool in place; on CUDA this 16-token chunk at
  # head dim 32 is gathered onto the attention kernels.
  assert (FWD_TARGET if ON_GPU else PAGED_TARGET) in hlo(f, *args)


def test_vmap_over_a_leading_axis():
  rng = np.random.default_rng(6)
  q, kc, vc, tables, lengths = _case(rng, *CASES["decode"])
  qs = jnp.stack([jnp.asarray(q), jnp.asarray(q) * 0.5]).astype(DTYPE)
  f = lambda q: jaxdnn.paged_attention(
    q, jnp.asarray(kc, DTYPE), jnp.asarray(vc, DTYPE), jnp.asarray(tables), jnp.asarray(lengths)
  )
  got = jax.vmap(f)(qs)
  for i in range(2):
    assert_close(got[i], f(qs[i]), tol(DTYPE))


@pytest.mark.parametrize(
  "change, error, match",
  [
    (dict(q=np.zeros((2, 4, 8), np.float32)), ValueError, r"query must be \[batch, q_len"),
    (dict(kc=np.zeros((5, 16, 2), np.float32)), ValueError, "key_cache must be"),
    (dict(vc=np.zeros((5, 8, 2, 32), np.float32)), ValueError, "must share"),
    (dict(tables=np.zeros((2, 3), np.float32)), TypeError, "block_tables must be integers"),
    (dict(tables=np.zeros((3, 3), np.int32)), ValueError, "block_tables must be"),
    (dict(lengths=np.zeros((2, 1), np.int32)), ValueError, "context_lengths must be"),
    (dict(q=np.zeros((2, 64, 8, 32), np.float32)), ValueError, "q_len 64 exceeds"),
    (dict(q=np.zeros((2, 1, 7, 32), np.float32)), ValueError, "must divide query's heads"),
  ],
)
def test_bad_arguments_are_named(change, error, match):
  args = dict(
    q=np.zeros((2, 1, 8, 32), np.float32),
    kc=np.zeros((5, 16, 2, 32), np.float32),
    vc=np.zeros((5, 16, 2, 32), np.float32),
    tables=np.zeros((2, 3), np.int32),
    lengths=np.ones((2,), np.int32),
  )
  args.update(change)
  with pytest.raises(error, match=match):
    jaxdnn.paged_attention(args["q"], args["kc"], args["vc"], args["tables"], args["lengths"])
