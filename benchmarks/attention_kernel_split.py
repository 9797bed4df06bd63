"""Per-kernel GPU time of a few attention calls (forward+backward), jaxdnn and
cuDNN through jax.nn side by side: where a case's time goes, kernel by kernel
(jaxdnn.bench.timing.kernel_lines, PyTorch's CUDA profiler).

  python benchmarks/attention_kernel_split.py [OUT.txt]

Cases: head dim 96 and 128 dense (b2 s8192, causal and not), boolean masks
[B, 1, T, T] and [B, 1, 1, T] at head dim 128 (b2 s4096), all forward and
backward; and paged_attention's decode against the contiguous one (forward,
one query token, 1k and 16k tokens, batch 1 and 64: the small cases where the
paged one trails)."""

import sys

import jax
import jax.numpy as jnp

import jaxdnn
from jaxdnn.bench import timing

HEADS = 16


def _loss(attn):
  def loss(q, k, v, x):
    return jnp.sum(attn(q, k, v, x).astype(jnp.float32))

  return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def _cases():
  keys = iter(jax.random.split(jax.random.key(7), 64))
  normal = lambda shape, dtype=jnp.bfloat16: jax.random.normal(next(keys), shape, dtype)
  for dim in (96, 128):
    for causal in (False, True):
      q, k, v = (normal((2, 8192, HEADS, dim)) for _ in range(3))
      name = f"d{dim} b2s8192{'c' if causal else ''}"
      yield (
        name,
        "jaxdnn",
        (lambda q, k, v, x, c=causal: jaxdnn.dot_product_attention(q, k, v, is_causal=c)),
        (q, k, v, None),
      )
      yield (
        name,
        "cudnn",
        (
          lambda q, k, v, x, c=causal: jax.nn.dot_product_attention(
            q, k, v, is_causal=c, implementation="cudnn"
          )
        ),
        (q, k, v, None),
      )
  q, k, v = (normal((2, 4096, HEADS, 128)) for _ in range(3))
  masks = {
    "B1TT": normal((2, 1, 4096, 4096), jnp.float32) > -1.2816,
    "B11T": (jnp.arange(4096)[None, :] < jnp.array([4096, 3072])[:, None])[:, None, None, :],
  }
  for kind, m in masks.items():
    yield (
      f"mask{kind} b2s4096",
      "jaxdnn",
      (lambda q, k, v, x: jaxdnn.dot_product_attention(q, k, v, mask=x)),
      (q, k, v, m),
    )


def _decode_cases():
  from jaxdnn.attention import paged_bench

  for batch, context in ((1, 1024), (1, 16384), (64, 1024)):
    q, kc, vc, tables, lengths = paged_bench._case(
      batch, context, 16, jax.random.key(batch + context)
    )
    k = jnp.take(kc, tables, axis=0).reshape(batch, context, *kc.shape[2:])
    v = jnp.take(vc, tables, axis=0).reshape(batch, context, *vc.shape[2:])
    name = f"decode b{batch} ctx{context}"
    yield name, "paged", jax.jit(jaxdnn.paged_attention), (q, kc, vc, tables, lengths)
    contiguous = jax.jit(lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, is_causal=True))
    yield name, "contiguous", contiguous, (q, k, v)


def _all():
  for name, impl, attn, args in _cases():
    yield f"{name} fwd+bwd", impl, _loss(attn), args
  for name, impl, fn, args in _decode_cases():
    yield f"{name} fwd", impl, fn, args


def main(argv):
  lines = []
  for name, impl, fn, args in _all():
    try:
      rows = timing.kernel_lines(timing.jax_runner(fn, *args), calls=5)
    except Exception as e:  # noqa: BLE001 - an anchor refusing a case is a line, not a crash
      rows = [f"  failed: {str(e)[:120]}"]
    total = sum(float(r.split()[0]) for r in rows if r.strip()[0].isdigit()) if rows else 0.0
    lines.append(f"{name} {impl}: {total:.1f} us GPU-busy")
    lines += rows or ["  (no PyTorch profiler)"]
    print("\n".join(lines[-(len(rows or [1]) + 1) :]), flush=True)
  if len(argv) > 1:
    with open(argv[1], "w") as f:
      f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
  main(sys.argv)
