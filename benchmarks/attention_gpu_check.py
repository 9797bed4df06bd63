"""Quick GPU self-check of the CUDA attention forward against the XLA oracle:
prints the max error per case (features x head dims x dtypes). A debugging aid
that runs before the test suite in benchmarks/gpu_run_attention.sh."""

import itertools
import sys
import warnings

import jax
import jax.numpy as jnp

import jaxdnn

warnings.simplefilter("ignore")


def case(name, b, t, s, n, kh, d, dtype, **kw):
  keys = jax.random.split(jax.random.PRNGKey(hash(name) % 2**31), 6)
  q = jax.random.normal(keys[0], (b, t, n, d), dtype)
  k = jax.random.normal(keys[1], (b, s, kh, d), dtype)
  v = jax.random.normal(keys[2], (b, s, kh, d), dtype)
  extra = {}
  if kw.pop("bias", False):
    extra["bias"] = jax.random.normal(keys[3], (1, n, t, s), jnp.float32)
  if kw.pop("bias_full", False):
    extra["bias"] = jax.random.normal(keys[3], (b, n, t, s), jnp.bfloat16)
  if kw.pop("mask", False):
    extra["mask"] = jax.random.bernoulli(keys[4], 0.7, (b, 1, t, s))
  if kw.pop("segments", False):
    extra["query_segment_ids"] = jnp.sort(jax.random.randint(keys[5], (b, t), 0, 4), axis=1)
    extra["key_value_segment_ids"] = jnp.sort(jax.random.randint(keys[5], (b, s), 0, 4), axis=1)
  if kw.pop("lengths", False):
    extra["query_seq_lengths"] = jnp.array([t // 2 + 1] + [t] * (b - 1), jnp.int32)
    extra["key_value_seq_lengths"] = jnp.array([s] + [s // 3 + 1] * (b - 1), jnp.int32)
  if kw.pop("dropout", False):
    extra.update(dropout_rate=0.25, dropout_rng=jax.random.PRNGKey(5))
  kw.update(extra)
  got, lse = jax.jit(
    lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, return_logsumexp=True, **kw)
  )(q, k, v)
  want, lse_ref = jaxdnn.dot_product_attention(
    q, k, v, return_logsumexp=True, implementation="xla", **kw
  )
  err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want.astype(jnp.float32))))
  fin = jnp.isfinite(lse_ref)
  lerr = float(jnp.max(jnp.where(fin, jnp.abs(lse - lse_ref), 0.0)))
  same_inf = bool(jnp.all(jnp.isfinite(lse) == fin))
  # Gradients w.r.t. query, key, value (and bias), against the oracle's.
  w = jax.random.normal(keys[5], got.shape, jnp.float32)
  bias = kw.pop("bias", None)

  def loss(impl, q, k, v, bias):
    o = jaxdnn.dot_product_attention(q, k, v, bias=bias, implementation=impl, **kw)
    return jnp.sum(o.astype(jnp.float32) * w)

  argn = (1, 2, 3, 4) if bias is not None else (1, 2, 3)
  g_got = jax.jit(jax.grad(loss, argnums=argn), static_argnums=0)(None, q, k, v, bias)
  g_want = jax.grad(loss, argnums=argn)("xla", q, k, v, bias)
  gerr = 0.0
  for a, b_ in zip(g_got, g_want):
    a, b_ = a.astype(jnp.float32), b_.astype(jnp.float32)
    gerr = max(gerr, float(jnp.max(jnp.abs(a - b_)) / (jnp.max(jnp.abs(b_)) + 1e-6)))
  ok = err < 0.05 and lerr < 1e-2 and same_inf and gerr < 0.03
  print(
    f"{'ok ' if ok else 'BAD'} {name:<40} out {err:.2e}  lse {lerr:.2e}  inf-match {same_inf}"
    f"  grad rel {gerr:.2e}",
    flush=True,
  )
  return ok


def long_sequence(tokens=131072, heads=4, dim=128):
  """A 128k-token single sequence, forward and backward, causal: O(N) memory."""
  import time

  keys = jax.random.split(jax.random.PRNGKey(3), 3)
  q, k, v = (jax.random.normal(kk, (1, tokens, heads, dim), jnp.bfloat16) for kk in keys)
  f = jax.jit(
    jax.value_and_grad(
      lambda q, k, v: jnp.sum(
        jaxdnn.dot_product_attention(q, k, v, is_causal=True).astype(jnp.float32)
      ),
      argnums=(0, 1, 2),
    )
  )
  try:
    val, grads = f(q, k, v)
    jax.block_until_ready(grads)
    t0 = time.perf_counter()
    val, grads = f(q, k, v)
    jax.block_until_ready(grads)
    dt = time.perf_counter() - t0
    finite = bool(jnp.isfinite(val)) and all(bool(jnp.all(jnp.isfinite(g))) for g in grads)
    print(
      f"{'ok ' if finite else 'BAD'} 128k tokens fwd+bwd causal: {dt * 1e3:.0f} ms, "
      f"finite {finite}",
      flush=True,
    )
    return finite
  except Exception as e:  # noqa: BLE001
    print(f"BAD 128k tokens fwd+bwd: {type(e).__name__}: {str(e)[:200]}", flush=True)
    return False


def main():
  print(
    "cuda attention kernels:",
    jaxdnn._extension.has_cuda_target("jaxdnn_attention_fwd"),
    jaxdnn._extension.has_cuda_target("jaxdnn_attention_bwd"),
  )
  hlo = (
    jax.jit(lambda q: jaxdnn.dot_product_attention(q, q, q))
    .lower(jnp.ones((1, 64, 2, 64), jnp.bfloat16))
    .compile()
    .as_text()
  )
  print("custom call in HLO:", "jaxdnn_attention_fwd" in hlo)
  ghlo = (
    jax.jit(jax.grad(lambda q: jnp.sum(jaxdnn.dot_product_attention(q, q, q).astype(jnp.float32))))
    .lower(jnp.ones((1, 64, 2, 64), jnp.bfloat16))
    .compile()
    .as_text()
  )
  print("backward custom call in HLO:", "jaxdnn_attention_bwd" in ghlo)
  ok = True
  for d, dtype in itertools.product((64, 128, 256, 96), (jnp.bfloat16, jnp.float16)):
    tag = f"d{d} {jnp.dtype(dtype).name}"
    ok &= case(f"plain {tag}", 2, 200, 333, 4, 4, d, dtype)
    ok &= case(f"causal {tag}", 2, 257, 257, 4, 2, d, dtype, is_causal=True)
  for name, kw in [
    ("causal bottom-right", dict(is_causal=True)),
    ("window", dict(local_window_size=(37, 5))),
    ("bias", dict(bias=True)),
    ("mask", dict(mask=True)),
    ("segments", dict(segments=True, is_causal=True)),
    ("lengths", dict(lengths=True, is_causal=True)),
    ("softcap", dict(softcap=5.0)),
    ("dropout", dict(dropout=True)),
    ("gqa8", dict()),
  ]:
    ok &= case(
      name,
      2,
      100 if name != "causal bottom-right" else 70,
      300,
      8,
      1 if name == "gqa8" else 8,
      128,
      jnp.bfloat16,
      **kw,
    )
  ok &= case("decode", 4, 1, 4099, 8, 2, 128, jnp.bfloat16, is_causal=True)
  ok &= case("bias full", 2, 70, 90, 4, 4, 64, jnp.bfloat16, bias_full=True)
  ok &= case("gqa4 window d256", 2, 130, 140, 8, 2, 256, jnp.bfloat16, local_window_size=(20, 0))
  ok &= long_sequence()
  print("ALL OK" if ok else "SOME BAD")
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
