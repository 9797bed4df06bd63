"""Context-parallel attention across two or more GPUs of one host (skips elsewhere).

The CPU-device version of these checks is in test_attention_sharding.py; here
the per-device attention is the CUDA kernel in bfloat16 and the reference is
the same kernel on one GPU with the whole sequence.
"""

import jax
import jax.numpy as jnp
import pytest
from attention_cases import BWD_TARGET, FWD_TARGET, assert_close, context_parallel_and_whole
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

GPUS = [d for d in jax.devices() if d.platform == "gpu"]
pytestmark = pytest.mark.skipif(len(GPUS) < 2, reason="needs 2 GPUs")


@pytest.mark.parametrize(
  "kw",
  [
    dict(is_causal=True),
    dict(),
    dict(is_causal=True, local_window_size=300),
    dict(is_causal=True, segments=True),
  ],
  ids=["causal", "full", "causal_window", "causal_segments"],
)
def test_gpu_context_parallel_matches_one_gpu(kw):
  kw = dict(kw)
  use_segments = kw.pop("segments", False)
  n_dev = len(GPUS)
  mesh = jax.make_mesh((n_dev,), ("seq",), devices=GPUS)
  ks = jax.random.split(jax.random.PRNGKey(5), 5)
  b, t, n, kh, d = 2, 1024 * n_dev, 8, 2, 128
  q, k, v = (
    jax.random.normal(ks[i], shape, jnp.bfloat16)
    for i, shape in enumerate([(b, t, n, d), (b, t, kh, d), (b, t, kh, d)])
  )
  seg = jnp.sort(jax.random.randint(ks[3], (b, t), 0, 4), axis=1)
  w = jax.random.normal(ks[4], (b, t, n, d), jnp.bfloat16)
  seq = NamedSharding(mesh, P(None, "seq"))
  qs, kss, vs, segs, ws = (jax.device_put(x, seq) for x in (q, k, v, seg, w))

  cp, one_gpu = context_parallel_and_whole(mesh, kw, use_segments)

  one = [jax.device_put(x, GPUS[0]) for x in (q, k, v, seg, w)]
  assert_close(jax.jit(cp)(qs, kss, vs, segs), jax.jit(one_gpu)(*one[:4]), 2e-2)
  loss = lambda f, s, w: lambda q, k, v: jnp.sum((f(q, k, v, s) * w).astype(jnp.float32))
  got = jax.jit(jax.grad(loss(cp, segs, ws), argnums=(0, 1, 2)))(qs, kss, vs)
  want = jax.jit(jax.grad(loss(one_gpu, one[3], one[4]), argnums=(0, 1, 2)))(*one[:3])
  for g, r, name in zip(got, want, "qkv"):
    assert_close(g, r, 6e-2, err_msg=f"d{name}")
  fwd_text = jax.jit(cp).lower(qs, kss, vs, segs).compile().as_text()
  assert FWD_TARGET in fwd_text and "all-gather" in fwd_text
  bwd_text = (
    jax.jit(jax.grad(loss(cp, segs, ws), argnums=(0, 1, 2))).lower(qs, kss, vs).compile().as_text()
  )
  assert BWD_TARGET in bwd_text
