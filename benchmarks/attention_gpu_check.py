"""Quick GPU self-check of the CUDA attention forward against the XLA oracle:
prints the max error per case (features x head dims x dtypes). A debugging aid
that runs before the test suite in benchmarks/gpu_run_attention.sh."""

import itertools
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np

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
  got, lse = jax.jit(lambda q, k, v: jaxdnn.dot_product_attention(
      q, k, v, return_logsumexp=True, **kw))(q, k, v)
  want, lse_ref = jaxdnn.dot_product_attention(q, k, v, return_logsumexp=True,
                                               implementation="xla", **kw)
  err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want.astype(jnp.float32))))
  fin = jnp.isfinite(lse_ref)
  lerr = float(jnp.max(jnp.where(fin, jnp.abs(lse - lse_ref), 0.0)))
  same_inf = bool(jnp.all(jnp.isfinite(lse) == fin))
  ok = err < 0.05 and lerr < 1e-2 and same_inf
  print(f"{'ok ' if ok else 'BAD'} {name:<40} out {err:.2e}  lse {lerr:.2e}  inf-match {same_inf}",
        flush=True)
  return ok


def main():
  print("cuda attention kernel:", jaxdnn._extension.has_cuda_target("jaxdnn_attention_fwd"))
  hlo = jax.jit(lambda q: jaxdnn.dot_product_attention(q, q, q)).lower(
      jnp.ones((1, 64, 2, 64), jnp.bfloat16)).compile().as_text()
  print("custom call in HLO:", "jaxdnn_attention_fwd" in hlo)
  ok = True
  for d, dtype in itertools.product((64, 128, 256, 96), (jnp.bfloat16, jnp.float16)):
    tag = f"d{d} {jnp.dtype(dtype).name}"
    ok &= case(f"plain {tag}", 2, 200, 333, 4, 4, d, dtype)
    ok &= case(f"causal {tag}", 2, 257, 257, 4, 2, d, dtype, is_causal=True)
  for name, kw in [("causal bottom-right", dict(is_causal=True)),
                   ("window", dict(local_window_size=(37, 5))),
                   ("bias", dict(bias=True)), ("mask", dict(mask=True)),
                   ("segments", dict(segments=True, is_causal=True)),
                   ("lengths", dict(lengths=True, is_causal=True)),
                   ("softcap", dict(softcap=5.0)), ("dropout", dict(dropout=True)),
                   ("gqa8", dict())]:
    ok &= case(name, 2, 100 if name != "causal bottom-right" else 70, 300, 8,
               1 if name == "gqa8" else 8, 128, jnp.bfloat16, **kw)
  ok &= case("decode", 4, 1, 4099, 8, 2, 128, jnp.bfloat16, is_causal=True)
  print("ALL OK" if ok else "SOME BAD")
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
