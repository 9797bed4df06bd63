"""jaxdnn-demo --model resnet: train a small ResNet built from jaxdnn.conv
and jaxdnn.batch_norm on generated 32x32 pictures of six shapes (demo/
shapes.py), under jit and grad.

Each residual block is conv -> batch_norm(relu) -> conv -> batch_norm(+
shortcut, relu), the shortcut add and the ReLUs fused into jaxdnn's
batch_norm; the stem convolution carries its bias and ReLU in the conv's
fused epilogue. Runs on the CPU by default and on the GPU when jax sees one.
Prints the loss falling, the held-out accuracy, and the training step's time
with jaxdnn's ops against the same model on plain XLA.
    jaxdnn-demo --model resnet [--steps 300] [--width 16] [--batch 64]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn
from jaxdnn.bench.timing import time_jax
from jaxdnn.demo import shapes

STAGES = (1, 2, 4)  # channel multipliers; stride 2 at each stage after the first


def init(key, width, n_classes):
  keys = iter(jax.random.split(key, 64))
  he = lambda shape: jax.random.normal(next(keys), shape) * np.sqrt(2.0 / np.prod(shape[:-1]))
  params = {"stem_w": he((3, 3, 3, width)), "stem_b": jnp.zeros(width), "blocks": []}
  c = width
  for i, m in enumerate(STAGES):
    out = width * m
    blk = {
      "w1": he((3, 3, c, out)),
      "w2": he((3, 3, out, out)) * 0.5,
      "bn1": (jnp.ones(out), jnp.zeros(out)),
      "bn2": (jnp.ones(out), jnp.zeros(out)),
    }
    if i > 0 or c != out:
      blk["proj"] = he((1, 1, c, out))
    params["blocks"].append(blk)
    c = out
  params["head_w"] = jax.random.normal(next(keys), (c, n_classes)) * np.sqrt(1.0 / c)
  params["head_b"] = jnp.zeros(n_classes)
  return params


def init_stats(params):
  return [
    {k: (jnp.zeros(b[k][0].shape), jnp.ones(b[k][0].shape)) for k in ("bn1", "bn2")}
    for b in params["blocks"]
  ]


def forward(params, stats, x, *, train, implementation=None):
  """Logits and the new running statistics."""
  impl = implementation
  h = jaxdnn.conv(x, params["stem_w"], params["stem_b"], activation="relu", implementation=impl)
  new_stats = []
  for i, (blk, st) in enumerate(zip(params["blocks"], stats)):
    stride = 1 if i == 0 else 2
    shortcut = h
    if "proj" in blk:
      shortcut = jaxdnn.conv(h, blk["proj"], strides=stride, padding="VALID", implementation=impl)
    y = jaxdnn.conv(h, blk["w1"], strides=stride, implementation=impl)
    y, m1, v1 = jaxdnn.batch_norm(
      y, *blk["bn1"], *st["bn1"], use_running_average=not train, momentum=0.9,
      activation="relu", implementation=impl,
    )  # fmt: skip
    y = jaxdnn.conv(y, blk["w2"], implementation=impl)
    h, m2, v2 = jaxdnn.batch_norm(
      y, *blk["bn2"], *st["bn2"], use_running_average=not train, momentum=0.9,
      activation="relu", residual=shortcut, implementation=impl,
    )  # fmt: skip
    new_stats.append({"bn1": (m1, v1), "bn2": (m2, v2)})
  pooled = jaxdnn.global_avg_pool(h, implementation=impl)
  return pooled @ params["head_w"] + params["head_b"], new_stats


def make_step(implementation, lr=0.05, beta=0.9):
  def loss_fn(p, stats, x, labels):
    logits, new_stats = forward(p, stats, x, train=True, implementation=implementation)
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1)), new_stats

  @jax.jit
  def step(p, m, stats, x, labels):
    (loss, new_stats), g = jax.value_and_grad(loss_fn, has_aux=True)(p, stats, x, labels)
    m = jax.tree.map(lambda m, g: beta * m + g, m, g)
    p = jax.tree.map(lambda p, m: p - lr * m, p, m)
    return p, m, new_stats, loss

  return step


def accuracy(params, stats, x, labels, batch=256):
  predict = jax.jit(lambda p, s, x: jnp.argmax(forward(p, s, x, train=False)[0], -1))
  hits = 0
  for i in range(0, x.shape[0], batch):
    hits += int(jnp.sum(predict(params, stats, x[i : i + batch]) == labels[i : i + batch]))
  return hits / x.shape[0]


def main(argv=None):
  ap = argparse.ArgumentParser(prog="jaxdnn-demo --model resnet")
  ap.add_argument("--steps", type=int, default=300)
  ap.add_argument("--width", type=int, default=16)
  ap.add_argument("--batch", type=int, default=64)
  ap.add_argument("--train-images", type=int, default=6000)
  ap.add_argument("--test-images", type=int, default=1000)
  args = ap.parse_args(argv)
  print(
    f"jaxdnn demo (ResNet) on {jax.devices()[0].device_kind} ({jax.default_backend()}), "
    f"CUDA kernels built: {jaxdnn.has_cuda_kernels()}"
  )
  x_np, y_np = shapes.make(args.train_images + args.test_images, seed=0)
  x, labels = jnp.asarray(x_np), jnp.asarray(y_np)
  xt, yt = x[args.train_images :], labels[args.train_images :]
  x, labels = x[: args.train_images], labels[: args.train_images]
  print(
    f"data: {args.train_images} training and {args.test_images} held-out 32x32 images of "
    f"{len(shapes.CLASSES)} shapes ({', '.join(shapes.CLASSES)})"
  )
  params = init(jax.random.key(1), args.width, len(shapes.CLASSES))
  stats = init_stats(params)
  momentum = jax.tree.map(jnp.zeros_like, params)
  step = make_step(None)
  t0 = time.perf_counter()
  for i in range(args.steps):
    idx = jax.random.randint(jax.random.key(i), (args.batch,), 0, x.shape[0])
    params, momentum, stats, loss = step(params, momentum, stats, x[idx], labels[idx])
    if i % max(1, args.steps // 10) == 0 or i == args.steps - 1:
      print(f"step {i:4d}  loss {float(loss):.4f}")
  print(f"trained {args.steps} steps in {time.perf_counter() - t0:.1f} s")
  print(f"held-out accuracy: {accuracy(params, stats, xt, yt):.3f} (chance {1 / 6:.3f})")

  # The training step with jaxdnn's ops against the same model on plain XLA.
  xb, yb = x[: args.batch], labels[: args.batch]
  times = {}
  for impl in (None, "xla"):
    f = make_step(impl)
    times[impl] = time_jax(f, params, momentum, stats, xb, yb, repeats=5)
  print(
    f"training step (batch {args.batch}): jaxdnn {times[None] * 1e3:.2f} ms   "
    f"xla {times['xla'] * 1e3:.2f} ms   ({times['xla'] / times[None]:.2f}x)"
  )
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
