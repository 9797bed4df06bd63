"""A step-by-step BatchNorm smoke run for the GPU machine: each primitive
eagerly, then the layer jitted and differentiated, printing (and flushing)
before and after each, so a crash names its step."""

import sys

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn
from jaxdnn.cnn_norms import batch_norm_primitives as prims


def say(*a):
  print(*a, flush=True)


def main():
  say("devices", jax.devices())
  for shape, dtype in (
    ((4, 5, 8), jnp.float16),
    ((64, 256), jnp.bfloat16),
    ((33, 12), jnp.float32),
  ):
    rows, c = int(np.prod(shape[:-1])), shape[-1]
    x = jax.random.normal(jax.random.key(0), (rows, c), jnp.float32).astype(dtype)
    shift = jnp.zeros(c)
    kw = dict(act=1, param=0.0, residual=False, training=True, epsilon=1e-5, momentum=0.9)
    kw["implementation"] = None
    say("stats", shape, dtype.__name__ if hasattr(dtype, "__name__") else dtype)
    s1, s2 = prims.stats.bind(x, shift, **kw)
    say("  ->", np.asarray(s1)[:3])
    st = (shift, s1, s2, jnp.full((c,), float(rows)), jnp.ones(c))
    say("apply")
    y, m, v = prims.apply.bind(x, *st, jnp.ones(c), jnp.zeros(c), **kw)
    say("  ->", np.asarray(y.astype(jnp.float32))[0, :3])
    for train in (True, False):
      for res in (None, x):
        say("layer grad", "train" if train else "infer", "residual" if res is not None else "")

        def loss(x, r):
          y = jaxdnn.batch_norm(
            x.reshape(shape), use_running_average=not train, activation="relu", residual=r
          )[0]
          return jnp.sum(y.astype(jnp.float32) ** 2)

        r = None if res is None else res.reshape(shape)
        g = jax.jit(jax.grad(loss))(x, r)
        say("  ->", float(jnp.sum(g.astype(jnp.float32))))
  say("smoke ok")


if __name__ == "__main__":
  sys.exit(main())
