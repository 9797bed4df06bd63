"""python -m jaxdnn.bench pool: max and average pooling against XLA's
reduce_window and PyTorch (channels-last) in one process.

Bytes counted (the minimum traffic): forward reads x and writes y; backward
reads dy (and, for max, the int32 indices the forward kept) and writes dx.
Backward time is (fwd+bwd) - fwd, as for the other memory-bound families;
the plain forward writes no index (only a gradient's forward does), so for
max the backward's bytes count the index written as well as read.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn
from jaxdnn.bench import memory_bound
from jaxdnn.bench.memory_bound import jax_rows, torch_rows

# (op, x shape NHWC / NDHWC, window, strides, padding): ResNet-50's stem max
# pool, a 2x2 average pool, global average pooling's input, a video pool.
CASES = [
  ("max", (128, 112, 112, 64), (3, 3), (2, 2), "SAME"),
  ("avg", (128, 56, 56, 256), (2, 2), (2, 2), "VALID"),
  ("avg", (128, 7, 7, 2048), (7, 7), (1, 1), "VALID"),
  ("max", (8, 16, 56, 56, 64), (1, 3, 3), (1, 2, 2), "SAME"),
]


def _out(shape, window, strides, padding):
  sp = shape[1:-1]
  if padding == "SAME":
    return tuple(-(-s // st) for s, st in zip(sp, strides))
  return tuple((s - w) // st + 1 for s, w, st in zip(sp, window, strides))


def run(cases=None, dtype=jnp.bfloat16, with_torch=True, impls=None, ops=None):
  records = []
  on_gpu = jax.default_backend() == "gpu"
  want = lambda name: impls is None or name in impls
  item = np.dtype(dtype).itemsize
  table = (
    CASES
    if not cases
    else [("max", tuple(c), (2,) * (len(c) - 2), (2,) * (len(c) - 2), "VALID") for c in cases]
  )
  for op, shape, window, strides, padding in table:
    if ops is not None and op not in ops:
      continue
    k = jax.random.split(jax.random.key(sum(shape)), 2)
    x = jax.random.normal(k[0], shape, jnp.float32).astype(dtype)
    out = (shape[0],) + _out(shape, window, strides, padding) + (shape[-1],)
    cot = jax.random.normal(k[1], out, dtype)
    n_in, n_out = int(np.prod(shape)), int(np.prod(out))
    nb_f = (n_in + n_out) * item
    nb_b = (n_out + n_in) * item + (8 * n_out if op == "max" else 0)
    fn = jaxdnn.max_pool if op == "max" else jaxdnn.avg_pool
    f = lambda impl, fn=fn: lambda x: fn(x, window, strides, padding, implementation=impl)
    rs = jax_rows("jaxdnn", f(None), (x,), cot, nb_f, nb_b)
    if want("xla"):
      rs += jax_rows("xla", f("xla"), (x,), cot, nb_f, nb_b)
    # PyTorch pads symmetrically: SAME only for max pools with odd windows.
    if on_gpu and with_torch and want("torch") and (op == "max" or padding == "VALID"):

      def torch_pool(torch, op=op):
        F = torch.nn.functional
        pool = {("max", 2): F.max_pool2d, ("max", 3): F.max_pool3d, ("avg", 2): F.avg_pool2d}
        pool = pool[(op, len(window))]
        pad = tuple(w // 2 for w in window) if padding == "SAME" else 0

        def run(x):
          t = x.permute(0, x.dim() - 1, *range(1, x.dim() - 1))
          return pool(t, window, strides, pad).permute(0, *range(2, x.dim()), 1)

        return run

      rs += torch_rows(torch_pool, (x,), cot, nb_f, nb_b)
    for rec in rs:
      rec.update(op=f"{op}_pool", case="x".join(map(str, shape)), dtype=np.dtype(dtype).name)
    records += rs
    del x, cot
  return records


def main(argv=None):
  return memory_bound.main("pooling", run, argv)
