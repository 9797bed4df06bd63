"""One forward launch of the CUDA attention kernel, for ncu (profile_attention.sh)."""

import jax
import jax.numpy as jnp

import jaxdnn

keys = jax.random.split(jax.random.PRNGKey(0), 3)
q, k, v = (jax.random.normal(kk, (4, 4096, 16, 128), jnp.bfloat16) for kk in keys)
f = jax.jit(lambda q, k, v: jaxdnn.dot_product_attention(q, k, v))
f(q, k, v).block_until_ready()
f(q, k, v).block_until_ready()
