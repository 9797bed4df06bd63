"""A small jax program that calls every CUDA kernel family once or twice,
forward and backward, for compute-sanitizer memcheck (run_selftests.sh):
attention (plain, causal GQA with bias, packed documents, decode, an odd head
dim), the norms (vector and scalar widths, a fused residual) and the
softmax family (rows in one CTA, split over 2 and 8 cluster CTAs, staged and
in registers, with and without `where`, two-pass widths; cross-entropy)."""

import sys

import jax
import jax.numpy as jnp

import jaxdnn

IMPL = sys.argv[1] if len(sys.argv) > 1 else "cuda"  # "cpu": a smoke run without a GPU
key = iter(jax.random.split(jax.random.key(0), 64))


def normal(shape, dtype=jnp.bfloat16):
  return jax.random.normal(next(key), shape, dtype)


def attention_cases():
  q, k, v = normal((2, 200, 8, 128)), normal((2, 200, 2, 128)), normal((2, 200, 2, 128))
  ids = jnp.repeat(jnp.arange(4), 50)[None].repeat(2, 0)
  yield dict(query=q, key=k, value=v)
  yield dict(query=q, key=k, value=v, is_causal=True, bias=normal((1, 8, 200, 200)))
  yield dict(query=q, key=k, value=v, query_segment_ids=ids, key_value_segment_ids=ids)
  yield dict(
    query=normal((2, 33, 4, 40), jnp.float16),
    key=normal((2, 70, 4, 40), jnp.float16),
    value=normal((2, 70, 4, 40), jnp.float16),
    local_window_size=(16, 0),
  )
  yield dict(
    query=normal((4, 1, 8, 64)), key=normal((4, 3000, 8, 64)), value=normal((4, 3000, 8, 64))
  )


def main():
  for kw in attention_cases():
    f = lambda **a: jnp.sum(
      jaxdnn.dot_product_attention(**a, implementation=IMPL).astype(jnp.float32)
    )
    grads = jax.grad(lambda q, k, v: f(**(kw | dict(query=q, key=k, value=v))), argnums=(0, 1, 2))
    jax.block_until_ready(grads(kw["query"], kw["key"], kw["value"]))
  for width in (1024, 4097, 768):
    x, r = normal((300, width)), normal((300, width))
    scale = 1.0 + 0.1 * normal((width,), jnp.float32)
    for op in (jaxdnn.layer_norm, jaxdnn.rms_norm):
      loss = lambda x, s: jnp.sum(op(x, s, implementation=IMPL).astype(jnp.float32) ** 2)
      jax.block_until_ready(jax.grad(loss, argnums=(0, 1))(x, scale))
      res = lambda x, r: jnp.sum(op(x, residual=r, implementation=IMPL)[0].astype(jnp.float32))
      jax.block_until_ready(jax.grad(res, argnums=(0, 1))(x, r))
  for width in (1000, 4096, 16392, 131080, 4097):
    x = normal((3, width))
    where = jax.random.bernoulli(next(key), 0.8, x.shape)
    for op in (jaxdnn.softmax, jaxdnn.log_softmax):
      for w in (None, where):
        loss = lambda x: jnp.sum(jnp.sin(op(x, where=w, implementation=IMPL).astype(jnp.float32)))
        jax.block_until_ready(jax.grad(loss)(x))
    labels = jnp.array([0, width // 2, width - 1])
    loss = lambda x: jaxdnn.softmax_cross_entropy(
      x, labels, label_smoothing=0.1, implementation=IMPL
    )
    jax.block_until_ready(jax.grad(loss)(x))
  print("memcheck smoke: ALL PASSED")


if __name__ == "__main__":
  main()
