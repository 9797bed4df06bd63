"""jaxdnn-demo --model mlp: train a small pre-norm model built on jaxdnn.

Each block splits the hidden vector into a few tokens and mixes them with
causal grouped-query self attention (jaxdnn.dot_product_attention), then
applies an MLP; the residual adds are fused into jaxdnn.layer_norm and a
jaxdnn.rms_norm closes the stack. Runs on the CPU by default and on the GPU
when jax sees one (attention in bfloat16 there, for the CUDA kernel). Prints
the loss falling, then jaxdnn-vs-XLA timings of the ops the model used.
    jaxdnn-demo --model mlp [--steps 200] [--width 256]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

import jaxdnn
from jaxdnn.bench.timing import time_jax

TOKENS, HEADS, KV_HEADS = 8, 4, 2  # the hidden vector as 8 tokens; GQA 4:2


def init(key, width, depth, n_in, n_out):
  keys = jax.random.split(key, depth + 2)
  dense = lambda k, i, o: jax.random.normal(k, (i, o), jnp.float32) * (1.0 / i) ** 0.5
  tok = width // TOKENS
  kv = tok * KV_HEADS // HEADS
  blocks = [
    dict(
      ln_scale=jnp.ones(width),
      ln_bias=jnp.zeros(width),
      wq=dense(jax.random.fold_in(k, 2), tok, tok),
      wkv=dense(jax.random.fold_in(k, 3), tok, 2 * kv),
      wo=dense(jax.random.fold_in(k, 4), tok, tok) * 0.5,
      w1=dense(k, width, 2 * width),
      w2=dense(jax.random.fold_in(k, 1), 2 * width, width),
    )
    for k in keys[2:]
  ]
  return dict(
    embed=dense(keys[0], n_in, width),
    blocks=blocks,
    rms_scale=jnp.zeros(width),
    head=dense(keys[1], width, n_out),
  )


def attention_dtype():
  # The CUDA kernel takes bfloat16/float16; the CPU kernel also takes float32.
  return jnp.bfloat16 if jax.default_backend() == "gpu" else jnp.float32


def token_mixing(blk, normed, implementation=None):
  """Causal GQA self attention over the hidden vector split into TOKENS tokens."""
  batch, width = normed.shape
  tok = width // TOKENS
  t = normed.reshape(batch, TOKENS, tok)
  q = (t @ blk["wq"]).reshape(batch, TOKENS, HEADS, tok // HEADS)
  k, v = jnp.split((t @ blk["wkv"]).reshape(batch, TOKENS, 2 * KV_HEADS, tok // HEADS), 2, axis=2)
  dt = attention_dtype()
  o = jaxdnn.dot_product_attention(
    q.astype(dt), k.astype(dt), v.astype(dt), is_causal=True, implementation=implementation
  )
  return (o.astype(normed.dtype).reshape(batch, TOKENS, tok) @ blk["wo"]).reshape(batch, width)


def forward(params, x, implementation=None):
  h = x @ params["embed"]
  residual = jnp.zeros_like(h)
  for blk in params["blocks"]:
    # Pre-norm block: the residual add is fused into the LayerNorm kernel.
    normed, residual = jaxdnn.layer_norm(
      h, blk["ln_scale"], blk["ln_bias"], residual=residual, implementation=implementation
    )
    mixed = normed + token_mixing(blk, normed, implementation)
    h = jax.nn.gelu(mixed @ blk["w1"]) @ blk["w2"]
  out = jaxdnn.rms_norm(
    h + residual, params["rms_scale"], zero_centered_scale=True, implementation=implementation
  )
  return out @ params["head"]


def make_data(key, n, n_in, n_out):
  # A fixed random teacher: a smooth nonlinear map the student can learn.
  k1, k2, k3 = jax.random.split(key, 3)
  x = jax.random.normal(k1, (n, n_in))
  w = jax.random.normal(k2, (n_in, n_out)) / n_in**0.5
  v = jax.random.normal(k3, (n_in, n_out)) / n_in**0.5
  return x, jnp.tanh(x @ w) + 0.5 * jnp.sin(x @ v)


def main(argv=None):
  ap = argparse.ArgumentParser(prog="jaxdnn-demo --model mlp")
  ap.add_argument("--steps", type=int, default=200)
  ap.add_argument("--width", type=int, default=256)
  ap.add_argument("--depth", type=int, default=3)
  ap.add_argument("--batch", type=int, default=512)
  args = ap.parse_args(argv)
  print(
    f"jaxdnn demo on {jax.devices()[0].device_kind} ({jax.default_backend()}), "
    f"CUDA kernels built: {jaxdnn.has_cuda_kernels()}"
  )

  n_in, n_out = 64, 16
  x, y = make_data(jax.random.key(0), 8192, n_in, n_out)
  params = init(jax.random.key(1), args.width, args.depth, n_in, n_out)
  lr, beta = 3e-3, 0.9

  def loss_fn(p, xb, yb):
    return jnp.mean((forward(p, xb) - yb) ** 2)

  @jax.jit
  def step(p, m, xb, yb):
    loss, g = jax.value_and_grad(loss_fn)(p, xb, yb)
    m = jax.tree.map(lambda m, g: beta * m + g, m, g)
    p = jax.tree.map(lambda p, m: p - lr * m, p, m)
    return p, m, loss

  momentum = jax.tree.map(jnp.zeros_like, params)
  t0 = time.perf_counter()
  for i in range(args.steps):
    idx = jax.random.randint(jax.random.key(i), (args.batch,), 0, x.shape[0])
    params, momentum, loss = step(params, momentum, x[idx], y[idx])
    if i % max(1, args.steps // 10) == 0 or i == args.steps - 1:
      print(f"step {i:4d}  loss {float(loss):.4f}")
  print(f"trained {args.steps} steps in {time.perf_counter() - t0:.1f} s")
  full = float(jnp.mean((forward(params, x) - y) ** 2))
  print(f"final loss on all {x.shape[0]} examples: {full:.4f}")

  # jaxdnn vs the plain-XLA composition, on the activations this model used.
  h = jax.random.normal(jax.random.key(2), (args.batch * 16, args.width), jnp.float32)
  s = jnp.ones(args.width)
  print("\nop timings (fwd+bwd, jit):")
  for name, op in (("layer_norm", jaxdnn.layer_norm), ("rms_norm", jaxdnn.rms_norm)):
    times = {}
    for impl in (None, "xla"):
      f = jax.jit(
        jax.grad(lambda h, s: jnp.sum(op(h, s, implementation=impl) ** 2), argnums=(0, 1))
      )
      times[impl] = time_jax(f, h, s)
    print(
      f"  {name:<11} jaxdnn {times[None] * 1e6:8.1f} us   xla {times['xla'] * 1e6:8.1f} us   "
      f"({times['xla'] / times[None]:.2f}x)"
    )
  # Attention at a transformer-like size for the platform.
  big = jax.default_backend() == "gpu"
  shape = (4, 1024, 8, 64) if big else (4, 128, 4, 32)
  qa, ka, va = (
    jax.random.normal(k, shape, attention_dtype()) for k in jax.random.split(jax.random.key(3), 3)
  )
  times = {}
  for impl in (None, "xla"):
    f = jax.jit(
      jax.grad(
        lambda q, k, v: jnp.sum(
          jaxdnn.dot_product_attention(q, k, v, is_causal=True, implementation=impl).astype(
            jnp.float32
          )
          ** 2
        ),
        argnums=(0, 1, 2),
      )
    )
    times[impl] = time_jax(f, qa, ka, va)
  print(
    f"  {'attention':<11} jaxdnn {times[None] * 1e6:8.1f} us   xla {times['xla'] * 1e6:8.1f} us   "
    f"({times['xla'] / times[None]:.2f}x)  causal {shape} {jnp.dtype(attention_dtype()).name}"
  )
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
