"""python -m jaxdnn.bench cnn_norms: BatchNorm (training, with ReLU and the
residual fused; inference) and GroupNorm(32)+SiLU against XLA's
compositions and PyTorch (channels-last) in one process.

Bytes counted (the minimum traffic), per element of x: BatchNorm training
forward reads x and the residual and writes y (3 x itemsize), backward reads
dy and x and writes dx and the residual's gradient (4 x; the residual is
recomputed into z from x: read it too, 5 x); inference forward reads x and
the residual and writes y (3 x), backward reads dy and y (the ReLU's mask)
and writes dx and the residual's gradient (4 x). GroupNorm+SiLU forward 2 x,
backward reads dy and x, writes dx (3 x).
Backward time is (fwd+bwd) - fwd, as for the other memory-bound families.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn
from jaxdnn.bench import memory_bound
from jaxdnn.bench.memory_bound import jax_rows, torch_rows

# ResNet-50's activations at batch 128 (NHWC), the UNet's GroupNorm shapes
# at batch 16, and a video block.
BN_CASES = [(128, 56, 56, 256), (128, 28, 28, 512), (128, 14, 14, 1024), (128, 112, 112, 64)]
GN_CASES = [(16, 64, 64, 320), (16, 32, 32, 640), (4, 8, 32, 32, 256)]


def _torch_nchw(torch, a):
  """A channels-last NHWC (or NDHWC) tensor viewed as PyTorch's NCHW."""
  return a.permute(0, a.dim() - 1, *range(1, a.dim() - 1))


def _back(torch, y):
  return y.permute(0, *range(2, y.dim()), 1)


def run(cases=None, dtype=jnp.bfloat16, with_torch=True, impls=None, ops=None):
  records = []
  on_gpu = jax.default_backend() == "gpu"
  want = lambda name: impls is None or name in impls
  item = np.dtype(dtype).itemsize
  for shape in (cases or BN_CASES) if ops is None or "batch_norm" in ops else ():
    shape = tuple(shape)
    k = jax.random.split(jax.random.key(sum(shape)), 3)
    x = (jax.random.normal(k[0], shape, jnp.float32) + 0.5).astype(dtype)
    r = jax.random.normal(k[1], shape, dtype)
    cot = jax.random.normal(k[2], shape, dtype)
    c = shape[-1]
    s, b = jnp.ones(c), jnp.zeros(c)
    n = int(np.prod(shape))
    for train in (True, False):
      name = "bn_train" if train else "bn_infer"
      nb_f = 3 * n * item
      nb_b = (5 if train else 4) * n * item

      def f(impl, train=train):
        def g(x, r):
          return jaxdnn.batch_norm(
            x,
            s,
            b,
            use_running_average=not train,
            activation="relu",
            residual=r,
            implementation=impl,
          )[0]

        return g

      rs = jax_rows("jaxdnn", f(None), (x, r), cot, nb_f, nb_b)
      if want("xla"):
        rs += jax_rows("xla", f("xla"), (x, r), cot, nb_f, nb_b)
      if on_gpu and with_torch and want("torch"):

        def torch_bn(torch, train=train):
          F = torch.nn.functional
          rm = torch.zeros(c, device="cuda")
          rv = torch.ones(c, device="cuda")
          w = torch.ones(c, device="cuda")
          bb = torch.zeros(c, device="cuda")

          def fn(x, r):
            y = F.batch_norm(_torch_nchw(torch, x), rm, rv, w, bb, training=train)
            return _back(torch, F.relu(y + _torch_nchw(torch, r)))

          return fn

        rs += torch_rows(torch_bn, (x, r), cot, nb_f, nb_b)
      for rec in rs:
        rec.update(op=name, case="x".join(map(str, shape)), dtype=np.dtype(dtype).name)
      records += rs
    del x, r, cot
  for shape in (cases or GN_CASES) if ops is None or "group_norm" in ops else ():
    shape = tuple(shape)
    k = jax.random.split(jax.random.key(sum(shape) + 1), 2)
    x = (jax.random.normal(k[0], shape, jnp.float32) + 0.5).astype(dtype)
    cot = jax.random.normal(k[1], shape, dtype)
    c = shape[-1]
    s, b = jnp.ones(c), jnp.zeros(c)
    n = int(np.prod(shape))
    nb_f, nb_b = 2 * n * item, 3 * n * item
    f = lambda impl: (
      lambda x: jaxdnn.group_norm(x, s, b, num_groups=32, activation="silu", implementation=impl)
    )
    rs = jax_rows("jaxdnn", f(None), (x,), cot, nb_f, nb_b)
    if want("xla"):
      rs += jax_rows("xla", f("xla"), (x,), cot, nb_f, nb_b)
    if on_gpu and with_torch and want("torch"):

      def torch_gn(torch):
        # PyTorch's group_norm takes parameters of the input's dtype only.
        F = torch.nn.functional
        tdt = getattr(torch, np.dtype(dtype).name)
        w = torch.ones(c, device="cuda", dtype=tdt)
        bb = torch.zeros(c, device="cuda", dtype=tdt)
        return lambda x: _back(torch, F.silu(F.group_norm(_torch_nchw(torch, x), 32, w, bb)))

      rs += torch_rows(torch_gn, (x,), cot, nb_f, nb_b)
    for rec in rs:
      rec.update(op="gn32_silu", case="x".join(map(str, shape)), dtype=np.dtype(dtype).name)
    records += rs
    del x, cot
  return records


def main(argv=None):
  return memory_bound.main("cnn_norms", run, argv)
