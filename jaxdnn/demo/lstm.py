"""jaxdnn-demo --model lstm: a character-level LSTM language model trained on
the source of Python's standard library (bytes, a 256-symbol vocabulary), as
the GPT demo's.

Byte embedding -> a stacked LSTM (jaxdnn.rnn) -> the output projection fused
into the loss (jaxdnn.linear_cross_entropy). Adam with gradient clipping,
under jit/grad. Prints the loss falling, text sampled a byte at a time with
the LSTM's state carried between calls (initial_state), and a training
step's time with jaxdnn's kernels against the same model on the plain-XLA
compositions (the LSTM as a lax.scan).

    jaxdnn-demo --model lstm [--steps 150] [--hidden 128] [--layers 1] [--seq 64] [--batch 16]
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
from jaxdnn.recurrent import layout

VOCAB = 256


def config(args):
  gpu = jax.default_backend() == "gpu"
  base = (
    dict(hidden=1024, layers=2, seq=128, batch=64)
    if gpu
    else dict(hidden=128, layers=1, seq=64, batch=16)
  )
  for k in base:
    if getattr(args, k, None):
      base[k] = getattr(args, k)
  base["dtype"] = jnp.bfloat16 if gpu else jnp.float32
  return base


def init(key, c):
  k = jax.random.split(key, 3)
  h = c["hidden"]
  return dict(
    embed=jax.random.normal(k[0], (VOCAB, h)) * 0.5,
    lstm=layout.init_params(k[1], "lstm", h, h, num_layers=c["layers"]),
    head=jax.random.normal(k[2], (h, VOCAB)) / h**0.5,
    head_b=jnp.zeros(VOCAB),
  )


def run_lstm(p, tokens, c, state=None, impl=None):
  """The LSTM's outputs [batch, seq, hidden] and final (h, c)."""
  x = p["embed"][tokens].astype(c["dtype"])
  return jaxdnn.rnn(x, p["lstm"], mode="lstm", initial_state=state, implementation=impl)


def loss_fn(p, x, y, c, impl=None):
  h, _ = run_lstm(p, x, c, impl=impl)
  return jaxdnn.linear_cross_entropy(
    h.reshape(-1, c["hidden"]),
    p["head"].astype(c["dtype"]),
    y.reshape(-1),
    bias=p["head_b"].astype(c["dtype"]),
    implementation=impl,
  )


def make_step(c, impl=None, lr=1e-2, b1=0.9, b2=0.99, clip=1.0):
  @jax.jit
  def step(p, m, v, t, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y, c, impl)
    # Clipping by the global norm: a recurrence's gradients can spike.
    norm = jnp.sqrt(sum(jnp.sum(a * a) for a in jax.tree.leaves(g)))
    g = jax.tree.map(lambda a: a * jnp.minimum(1.0, clip / (norm + 1e-6)), g)
    p, m, v, t = adam(p, m, v, t, g, lr, b1, b2)
    return p, m, v, t, loss

  return step


def generate(p, c, prompt, n, temperature=0.8, seed=0):
  """`n` bytes after `prompt`: the prompt read in one call, then one byte per
  call, the LSTM's state carried from call to call."""

  @jax.jit
  def read(p, tokens, state):
    out, state = run_lstm(p, tokens[None], c, state)
    return (out[0, -1] @ p["head"].astype(out.dtype)).astype(jnp.float32) + p["head_b"], state

  zeros = jnp.zeros((c["layers"], 1, c["hidden"]), c["dtype"])
  logits, state = read(p, jnp.asarray(list(prompt), jnp.int32), (zeros, zeros))
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    z = np.asarray(logits, np.float64) / temperature
    probs = np.exp(z - z.max())
    out.append(int(rng.choice(VOCAB, p=probs / probs.sum())))
    logits, state = read(p, jnp.asarray(out[-1:], jnp.int32), state)
  return bytes(out).decode("utf-8", errors="replace")


def main(argv=None):
  ap = argparse.ArgumentParser(prog="jaxdnn-demo --model lstm")
  ap.add_argument("--steps", type=int, default=150)
  ap.add_argument("--hidden", type=int)
  ap.add_argument("--layers", type=int)
  ap.add_argument("--seq", type=int)
  ap.add_argument("--batch", type=int)
  ap.add_argument("--sample", type=int, default=160, help="bytes of text to generate")
  ap.add_argument("--corpus-bytes", type=int, default=2 << 20)
  args = ap.parse_args(argv)
  c = config(args)
  print(
    f"jaxdnn demo (lstm) on {jax.devices()[0].device_kind} ({jax.default_backend()}), "
    f"CUDA kernels built: {jaxdnn.has_cuda_kernels()}"
  )
  data = corpus.stdlib_bytes(args.corpus_bytes)
  train, valid = corpus.split(data)
  print(
    f"corpus: {len(data) / 2**20:.1f} MiB of the standard library's source; model: "
    f"{c['layers']}-layer LSTM, hidden {c['hidden']}, seq {c['seq']}, batch {c['batch']}, "
    f"{jnp.dtype(c['dtype']).name}"
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
  # plain-XLA compositions (jaxdnn.rnn's is a lax.scan over the steps).
  x, y = corpus.batches(train, rng, c["batch"], c["seq"])
  times = {}
  for impl in (None, "xla"):
    s = make_step(c, impl)
    times[impl] = time_jax(s, params, m, v, t, x, y, warmup=2, repeats=5, calls=2)
  print(
    f"\ntraining step: jaxdnn {times[None] * 1e3:.1f} ms   lax.scan (xla) "
    f"{times['xla'] * 1e3:.1f} ms   ({times['xla'] / times[None]:.2f}x)"
  )
  return 0
