"""One jitted attention backward (forward + grad), for ncu (profile_attention_bwd.sh).

  python3 profile_attention_bwd.py SEQ [--causal] [--dim 128] [--deterministic]
Batch x seq = 16k tokens, 16 heads, bfloat16, as in the benchmark grid.
"""

import argparse

import jax
import jax.numpy as jnp

import jaxdnn

ap = argparse.ArgumentParser()
ap.add_argument("seq", type=int)
ap.add_argument("--causal", action="store_true")
ap.add_argument("--dim", type=int, default=128)
ap.add_argument("--deterministic", action="store_true")
ap.add_argument(
  "--cudnn", action="store_true", help="jax.nn's cuDNN attention instead (the anchor)"
)
a = ap.parse_args()
batch = max(1, 16384 // a.seq)
keys = jax.random.split(jax.random.PRNGKey(0), 4)
q, k, v, w = (jax.random.normal(kk, (batch, a.seq, 16, a.dim), jnp.bfloat16) for kk in keys)
if a.cudnn:
  attend = lambda q, k, v: jax.nn.dot_product_attention(
    q, k, v, is_causal=a.causal, implementation="cudnn"
  )
else:
  attend = lambda q, k, v: jaxdnn.dot_product_attention(
    q, k, v, is_causal=a.causal, deterministic=a.deterministic
  )
loss = lambda q, k, v: jnp.sum(attend(q, k, v).astype(jnp.float32) * w)
g = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
for _ in range(2):
  jax.block_until_ready(g(q, k, v))
