"""One op's forward and backward, a few times, for a profiler to read
(`ncu --kernel-name regex:... python3 benchmarks/ncu_case.py OP SHAPE`).

  OP: bn_train | bn_infer | gn | max_pool | avg_pool | glu | grouped_conv (3x3,
  32 groups, algorithm="direct");  SHAPE: e.g. 128x14x14x1024
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp

import jaxdnn


def op_of(name, c):
  s, b = jnp.ones(c), jnp.zeros(c)
  if name.startswith("bn_"):
    infer = name == "bn_infer"
    return lambda x, r: jaxdnn.batch_norm(
      x, s, b, use_running_average=infer, activation="relu", residual=r
    )[0]
  if name == "gn":
    return lambda x, r: jaxdnn.group_norm(x, s, b, num_groups=32, activation="silu")
  if name == "max_pool":
    return lambda x, r: jaxdnn.max_pool(x, (3, 3), (2, 2), "SAME")
  if name == "avg_pool":
    return lambda x, r: jaxdnn.avg_pool(x, (3, 3), (1, 1), "SAME")
  if name == "glu":
    return lambda x, r: jaxdnn.glu(x)
  if name == "grouped_conv":
    w = jax.random.normal(jax.random.key(1), (3, 3, c // 32, c), jnp.float32).astype(jnp.bfloat16)
    return lambda x, r: jaxdnn.conv(x, w, feature_group_count=32, algorithm="direct")
  raise SystemExit(f"unknown op {name}")


def main():
  name, shape = sys.argv[1], tuple(int(v) for v in sys.argv[2].split("x"))
  k = jax.random.split(jax.random.key(0), 2)
  x = jax.random.normal(k[0], shape, jnp.float32).astype(jnp.bfloat16)
  r = jax.random.normal(k[1], shape, jnp.float32).astype(jnp.bfloat16)
  f = op_of(name, shape[-1])
  step = jax.jit(lambda x, r: jax.vjp(f, x, r)[1](f(x, r)))
  for _ in range(3):
    jax.block_until_ready(step(x, r))


if __name__ == "__main__":
  main()
