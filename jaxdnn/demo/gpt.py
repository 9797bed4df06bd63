"""jaxdnn-demo --model gpt: a character-level GPT trained on the source of
Python's standard library (bytes, a 256-symbol vocabulary).

Pre-norm decoder blocks: jaxdnn.rms_norm with the residual add fused in,
causal grouped-query attention (jaxdnn.dot_product_attention), a SwiGLU MLP
(one up-projection to value and gate, jaxdnn.glu), and the output projection
fused into the loss (jaxdnn.linear_cross_entropy). Adam, under jit/grad. Prints
the loss falling, generated text, and a training step's time with jaxdnn's
kernels against the same model on the plain-XLA compositions.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn
from jaxdnn.bench.timing import time_jax
from jaxdnn.demo import corpus
from jaxdnn.demo.adam import adam

VOCAB = 256


def config(args):
  gpu = jax.default_backend() == "gpu"
  base = (
    dict(width=384, depth=6, heads=6, kv_heads=2, seq=256, batch=64)
    if gpu
    else dict(width=128, depth=2, heads=4, kv_heads=2, seq=96, batch=16)
  )
  for k in base:
    if getattr(args, k, None):
      base[k] = getattr(args, k)
  base["dtype"] = jnp.bfloat16 if gpu else jnp.float32
  return base


def init(key, c):
  w, d = c["width"], c["width"] // c["heads"]
  ff = 8 * w // 3 // 16 * 16
  keys = iter(jax.random.split(key, 4 + 6 * c["depth"]))
  dense = lambda i, o, s=1.0: jax.random.normal(next(keys), (i, o), jnp.float32) * (s / i**0.5)
  blocks = [
    dict(
      norm1=jnp.ones(w),
      wq=dense(w, c["heads"] * d),
      wkv=dense(w, 2 * c["kv_heads"] * d),
      wo=dense(c["heads"] * d, w, 0.5 / c["depth"] ** 0.5),
      norm2=jnp.ones(w),
      w_up=dense(w, 2 * ff),  # value and gate, side by side
      w_down=dense(ff, w, 0.5 / c["depth"] ** 0.5),
    )
    for _ in range(c["depth"])
  ]
  return dict(
    embed=jax.random.normal(next(keys), (VOCAB, w)) * 0.5,
    pos=jax.random.normal(next(keys), (c["seq"], w)) * 0.1,
    blocks=blocks,
    norm_f=jnp.ones(w),
    head=dense(w, VOCAB),
  )


def hidden_states(p, tokens, c, impl=None):
  """The final normalized hidden states [batch, seq, width]."""
  dt = c["dtype"]
  b, t = tokens.shape
  d = c["width"] // c["heads"]
  resid = (p["embed"][tokens] + p["pos"][:t]).astype(dt)
  delta = jnp.zeros_like(resid)
  for blk in p["blocks"]:
    normed, resid = jaxdnn.rms_norm(delta, blk["norm1"], residual=resid, implementation=impl)
    q = (normed @ blk["wq"].astype(dt)).reshape(b, t, c["heads"], d)
    kv = (normed @ blk["wkv"].astype(dt)).reshape(b, t, 2 * c["kv_heads"], d)
    k, v = jnp.split(kv, 2, axis=2)
    att = jaxdnn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
    att = att.reshape(b, t, c["heads"] * d) @ blk["wo"].astype(dt)
    normed, resid = jaxdnn.rms_norm(att, blk["norm2"], residual=resid, implementation=impl)
    up = normed @ blk["w_up"].astype(dt)
    delta = jaxdnn.glu(up, activation="silu", implementation=impl) @ blk["w_down"].astype(dt)
  out, _ = jaxdnn.rms_norm(delta, p["norm_f"], residual=resid, implementation=impl)
  return out


def loss_fn(p, x, y, c, impl=None):
  h = hidden_states(p, x, c, impl)
  return jaxdnn.linear_cross_entropy(
    h.reshape(-1, c["width"]), p["head"].astype(c["dtype"]), y.reshape(-1), implementation=impl
  )


def make_step(c, impl=None, lr=3e-3, b1=0.9, b2=0.99):
  @jax.jit
  def step(p, m, v, t, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y, c, impl)
    p, m, v, t = adam(p, m, v, t, g, lr, b1, b2)
    return p, m, v, t, loss

  return step


def generate(p, c, prompt, n, temperature=0.8, seed=0):
  """`n` bytes after `prompt`, sampled one at a time over a sliding window."""

  @jax.jit
  def next_logits(p, window):
    h = hidden_states(p, window[None], c)[0, -1]
    return (h @ p["head"].astype(h.dtype)).astype(jnp.float32)

  out = list(prompt)
  rng = np.random.default_rng(seed)
  for _ in range(n):
    window = np.asarray(out[-c["seq"] :], np.int32)
    window = np.pad(window, (c["seq"] - len(window), 0), constant_values=ord(" "))
    logits = np.asarray(next_logits(p, jnp.asarray(window))) / temperature
    probs = np.exp(logits - logits.max())
    out.append(int(rng.choice(VOCAB, p=probs / probs.sum())))
  return bytes(out[len(prompt) :]).decode("utf-8", errors="replace")


def main(argv=None):
  ap = argparse.ArgumentParser(prog="jaxdnn-demo --model gpt")
  ap.add_argument("--steps", type=int, default=600)
  ap.add_argument("--width", type=int)
  ap.add_argument("--depth", type=int)
  ap.add_argument("--heads", type=int)
  ap.add_argument("--kv-heads", dest="kv_heads", type=int)
  ap.add_argument("--seq", type=int)
  ap.add_argument("--batch", type=int)
  ap.add_argument("--sample", type=int, default=240, help="bytes of text to generate")
  ap.add_argument("--corpus-bytes", type=int, default=2 << 20)
  args = ap.parse_args(argv)
  c = config(args)
  print(
    f"jaxdnn demo (gpt) on {jax.devices()[0].device_kind} ({jax.default_backend()}), "
    f"CUDA kernels built: {jaxdnn.has_cuda_kernels()}"
  )
  data = corpus.stdlib_bytes(args.corpus_bytes)
  train, valid = corpus.split(data)
  print(
    f"corpus: {len(data) / 2**20:.1f} MiB of the standard library's source; model: "
    f"{c['depth']} blocks, width {c['width']}, {c['heads']} heads ({c['kv_heads']} kv), "
    f"seq {c['seq']}, batch {c['batch']}, {jnp.dtype(c['dtype']).name}"
  )
  params = init(jax.random.key(0), c)
  zeros = lambda: jax.tree.map(jnp.zeros_like, params)
  m, v, t = zeros(), zeros(), jnp.zeros((), jnp.int32)
  step = make_step(c)
  rng = np.random.default_rng(0)
  eval_loss = jax.jit(lambda p, x, y: loss_fn(p, x, y, c))
  vx, vy = corpus.batches(valid, np.random.default_rng(1), c["batch"], c["seq"])
  t0 = time.perf_counter()
  for i in range(args.steps):
    x, y = corpus.batches(train, rng, c["batch"], c["seq"])
    params, m, v, t, loss = step(params, m, v, t, x, y)
    if i % max(1, args.steps // 10) == 0 or i == args.steps - 1:
      val = float(eval_loss(params, vx, vy))
      print(f"step {i:4d}  train loss {float(loss):.3f}  valid loss {val:.3f}  (nats/byte)")
  print(f"trained {args.steps} steps in {time.perf_counter() - t0:.1f} s")
  if args.sample:
    prompt = b"def "
    print("\nsample:\n" + prompt.decode() + generate(params, c, prompt, args.sample))

  # One training step with jaxdnn's kernels against the same model on the
  # plain-XLA compositions of every op.
  x, y = corpus.batches(train, rng, c["batch"], c["seq"])
  times = {}
  for impl in (None, "xla"):
    s = make_step(c, impl)
    times[impl] = time_jax(s, params, m, v, t, x, y, warmup=2, repeats=5)
  print(
    f"\ntraining step: jaxdnn {times[None] * 1e3:.1f} ms   xla {times['xla'] * 1e3:.1f} ms   "
    f"({times['xla'] / times[None]:.2f}x)"
  )
  return 0
