"""One call of each jaxdnn norm kernel on the target shapes, for ncu."""

import jax
import jax.numpy as jnp

import jaxdnn

for rows, dim in ((32768, 4096), (8192, 8192)):
  x = jax.random.normal(jax.random.key(0), (rows, dim), jnp.bfloat16)
  s = jnp.ones((dim,), jnp.float32)
  for op in (jaxdnn.layer_norm, jaxdnn.rms_norm):
    f = jax.jit(jax.grad(lambda x, s: jnp.sum(op(x, s).astype(jnp.float32) ** 2), argnums=(0, 1)))
    jax.block_until_ready(f(x, s))
