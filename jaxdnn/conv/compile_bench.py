"""The first call's compile time of a jitted ResNet-50 training step, jaxdnn's
convolutions, BatchNorm and max-pool against the same model on XLA's
(implementation="xla"): issue 25's compile-time target. XLA's GPU compile
includes its convolution autotuning, which runs each layer's candidates.

    python -m jaxdnn.bench conv_compile [--batch 32] [--size 224] [--out F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn

# (blocks, bottleneck width) per stage; output channels 4x the width.
STAGES = ((3, 64), (4, 128), (6, 256), (3, 512))


def init(key, classes=1000):
  keys = iter(jax.random.split(key, 256))

  def he(*shape):
    return jax.random.normal(next(keys), shape) * np.sqrt(2.0 / np.prod(shape[:-1]))

  bn = lambda c: (jnp.ones(c), jnp.zeros(c))
  p = {"stem": he(7, 7, 3, 64), "stem_bn": bn(64), "blocks": []}
  c = 64
  for i, (n, width) in enumerate(STAGES):
    for j in range(n):
      blk = {
        "w1": he(1, 1, c, width),
        "w2": he(3, 3, width, width),
        "w3": he(1, 1, width, 4 * width) * 0.2,
        "bn1": bn(width),
        "bn2": bn(width),
        "bn3": bn(4 * width),
        "stride": 2 if (j == 0 and i > 0) else 1,
      }
      if j == 0:
        blk["proj"] = he(1, 1, c, 4 * width)
        blk["bnp"] = bn(4 * width)
      p["blocks"].append(blk)
      c = 4 * width
  p["head"] = jax.random.normal(next(keys), (c, classes)) * np.sqrt(1.0 / c)
  return p


def _split(params):
  """The arrays (differentiated) and the strides (static)."""
  strides = [b["stride"] for b in params["blocks"]]
  arrays = dict(
    params, blocks=[{k: v for k, v in b.items() if k != "stride"} for b in params["blocks"]]
  )
  return arrays, strides


def loss_fn(arrays, x, labels, strides, impl):
  def conv(x, w, stride=1):
    return jaxdnn.conv(x, w, strides=stride, padding="SAME", implementation=impl)

  def bn(x, sb, activation="relu", residual=None):
    c = x.shape[-1]
    y, _, _ = jaxdnn.batch_norm(
      x, sb[0], sb[1], jnp.zeros(c), jnp.ones(c), use_running_average=False,
      activation=activation, residual=residual, implementation=impl,
    )  # fmt: skip
    return y

  h = bn(conv(x, arrays["stem"], 2), arrays["stem_bn"])
  h = jaxdnn.max_pool(h, (3, 3), (2, 2), "SAME", implementation=impl)
  for blk, s in zip(arrays["blocks"], strides):
    short = bn(conv(h, blk["proj"], s), blk["bnp"], None) if "proj" in blk else h
    y = bn(conv(h, blk["w1"]), blk["bn1"])
    y = bn(conv(y, blk["w2"], s), blk["bn2"])
    h = bn(conv(y, blk["w3"]), blk["bn3"], residual=short)
  logits = jnp.mean(h.astype(jnp.float32), axis=(1, 2)) @ arrays["head"]
  return jnp.mean(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, labels[:, None], -1))


def compile_seconds(impl, batch, size, dtype):
  params = init(jax.random.key(0))
  arrays, strides = _split(params)
  arrays = jax.tree.map(lambda a: a.astype(dtype), arrays)
  x = jax.random.normal(jax.random.key(1), (batch, size, size, 3), dtype)
  labels = jax.random.randint(jax.random.key(2), (batch,), 0, 1000)
  step = jax.jit(jax.grad(lambda a, x, y: loss_fn(a, x, y, strides, impl)))
  t0 = time.perf_counter()
  lowered = step.lower(arrays, x, labels)
  t1 = time.perf_counter()
  compiled = lowered.compile()
  t2 = time.perf_counter()
  jax.block_until_ready(compiled(arrays, x, labels))
  t3 = time.perf_counter()
  return dict(impl=impl or "jaxdnn", trace_s=t1 - t0, compile_s=t2 - t1, first_run_s=t3 - t2)


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  ap = argparse.ArgumentParser(prog="python -m jaxdnn.bench conv_compile")
  ap.add_argument("--batch", type=int, default=32)
  ap.add_argument("--size", type=int, default=224)
  ap.add_argument("--dtype", default="bfloat16")
  ap.add_argument("--out", help="write the records as JSON here")
  args = ap.parse_args(argv)
  device = jax.devices()[0]
  print(f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}")
  print(f"ResNet-50 training step, batch {args.batch}, {args.size}x{args.size}, {args.dtype}")
  records = []
  # XLA first: its autotuning results are cached in-process, and jaxdnn's
  # default runs some layers on XLA's convolution; jaxdnn second gets no
  # advantage from that (it autotunes what it runs anew only if unseen).
  for impl in ("xla", None):
    r = compile_seconds(impl, args.batch, args.size, jnp.dtype(args.dtype))
    records.append(r)
    print(
      f"{r['impl']:8s} trace {r['trace_s']:6.2f} s  compile {r['compile_s']:6.2f} s  "
      f"first run {r['first_run_s']:6.2f} s",
      flush=True,
    )
  ratio = records[0]["compile_s"] / records[1]["compile_s"]
  print(f"compile time, XLA / jaxdnn: {ratio:.2f}x")
  if args.out:
    with open(args.out, "w") as f:
      json.dump(dict(device=device.device_kind, jax=jax.__version__, records=records), f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
