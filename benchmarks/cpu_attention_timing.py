"""CPU attention timings: implementation="cpu" against "xla" (jit, warm-up,
median of many calls), forward and forward+backward, float32 and bfloat16,
on the README demo's shape and a few larger ones. Run on a CPU machine:
python benchmarks/cpu_attention_timing.py"""

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn.attention import dot_product_attention as dpa


def med(f, *a, n=30):
  jax.block_until_ready(f(*a))
  jax.block_until_ready(f(*a))
  ts = []
  for _ in range(n):
    t = time.perf_counter()
    jax.block_until_ready(f(*a))
    ts.append(time.perf_counter() - t)
  return float(np.median(ts)) * 1e6


cases = [
  ("demo", (4, 128, 4, 32), 4, True),
  ("512c", (2, 512, 8, 64), 8, True),
  ("512", (2, 512, 8, 64), 8, False),
  ("1000gqa", (1, 1000, 4, 128), 1, True),
]
res = {}
for dt in (jnp.float32, jnp.bfloat16):
  for name, (B, T, H, D), KH, causal in cases:
    ks = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.random.normal(ks[0], (B, T, H, D), dt)
    k = jax.random.normal(ks[1], (B, T, KH, D), dt)
    v = jax.random.normal(ks[2], (B, T, KH, D), dt)
    row = {}
    for impl in ("cpu", "xla"):
      fwd = jax.jit(lambda q, k, v, impl=impl: dpa(q, k, v, is_causal=causal, implementation=impl))
      loss = lambda q, k, v, impl=impl: jnp.sum(
        dpa(q, k, v, is_causal=causal, implementation=impl).astype(jnp.float32)
      )
      fb = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
      n = 15 if T >= 512 else 100
      row[impl] = (med(fwd, q, k, v, n=n), med(fb, q, k, v, n=n))
    key = f"{jnp.dtype(dt).name:8s} {name:8s}"
    c, x = row["cpu"], row["xla"]
    print(
      f"{key} fwd cpu {c[0]:9.0f} xla {x[0]:9.0f} ({x[0] / c[0]:.2f}x) | "
      f"fwd+bwd cpu {c[1]:9.0f} xla {x[1]:9.0f} ({x[1] / c[1]:.2f}x)",
      flush=True,
    )
