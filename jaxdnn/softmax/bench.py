"""softmax / log_softmax: jaxdnn against XLA and PyTorch in one process.

Bytes counted (the minimum traffic): forward reads x and writes y; backward
reads y and dy and writes dx. Backward time is (fwd+bwd) - fwd, as for the
norms (jaxdnn/norms/bench.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn
from jaxdnn.bench import liger, memory_bound, timing
from jaxdnn.bench.memory_bound import jax_rows, torch_rows
from jaxdnn.bench.timing import time_jax_chained, time_torch

# Issue 27's grid: 32768 x {4096, 32768} and 8192 x {32000, 128256, 256000}.
CASES = [(32768, 4096), (32768, 32768), (8192, 32000), (8192, 128256), (8192, 256000)]


def _loss_jax_rows(name, f, x, labels, nb_f, nb_b):
  """Cross-entropy: forward is the mean loss, backward its dlogits."""
  try:
    t_f = time_jax_chained(lambda x: f(x, labels), x)
    g = jax.grad(lambda x: f(x, labels))
    t_fb = time_jax_chained(g, x)
    b_f = timing.busy_jax(jax.jit(lambda x: f(x, labels)), x)
    b_fb = timing.busy_jax(jax.jit(g), x)
  except Exception as e:  # noqa: BLE001 - reported in the table
    return [dict(impl=name, error=f"{type(e).__name__}: {str(e)[:200]}")]
  return memory_bound.direction_rows(name, t_f, t_fb, nb_f, nb_b, b_f, b_fb)


def _loss_torch_rows(x, labels, nb_f, nb_b, name="torch"):
  """PyTorch's cross_entropy (or Liger's, name="liger"), mean over rows."""
  try:
    import torch

    if not torch.cuda.is_available():
      return []
    dtype = getattr(torch, np.dtype(x.dtype).name)
    tx = torch.from_numpy(np.array(x.astype(jnp.float32))).cuda().to(dtype)
    ty = torch.from_numpy(np.asarray(labels, np.int64)).cuda()
    fwd = lambda x: torch.nn.functional.cross_entropy(x, ty)
    if name == "liger":
      fwd = liger.cross_entropy(ty)
    with torch.no_grad():
      t_f = time_torch(lambda: fwd(tx))
      b_f = timing.busy_torch(lambda: fwd(tx))
    txg = tx.clone().requires_grad_(True)

    def fb():
      fwd(txg).backward()
      txg.grad = None

    t_fb = time_torch(fb)
    b_fb = timing.busy_torch(fb)
  except Exception as e:  # noqa: BLE001
    return [dict(impl=name, error=f"{type(e).__name__}: {str(e)[:200]}")]
  return memory_bound.direction_rows(name, t_f, t_fb, nb_f, nb_b, b_f, b_fb)


def run(cases=CASES, dtype=jnp.bfloat16, with_torch=True, impls=None, ops=None):
  records = []
  on_gpu = jax.default_backend() == "gpu"
  want = lambda name: impls is None or name in impls
  for log in (False, True):
    if ops is not None and ("log_softmax" if log else "softmax") not in ops:
      continue
    op = jaxdnn.log_softmax if log else jaxdnn.softmax
    for rows, cols in cases:
      k = jax.random.split(jax.random.key(rows + cols), 2)
      x = (3.0 * jax.random.normal(k[0], (rows, cols), jnp.float32)).astype(dtype)
      dy = jax.random.normal(k[1], (rows, cols), dtype)
      item = np.dtype(dtype).itemsize
      nb_f, nb_b = 2 * rows * cols * item, 3 * rows * cols * item
      rs = jax_rows("jaxdnn", lambda x: op(x), (x,), dy, nb_f, nb_b)
      if want("xla"):
        rs += jax_rows("xla", lambda x: op(x, implementation="xla"), (x,), dy, nb_f, nb_b)
      if on_gpu and with_torch and want("torch"):
        rs += torch_rows(
          lambda torch: (
            (lambda x: torch.log_softmax(x, -1)) if log else (lambda x: torch.softmax(x, -1))
          ),
          (x,),
          dy,
          nb_f,
          nb_b,
        )
      lg = liger.softmax() if on_gpu and not log and want("liger") else None
      if lg is not None:
        rs += torch_rows(lg, (x,), dy, nb_f, nb_b, name="liger")
      for r in rs:
        r.update(
          op="log_softmax" if log else "softmax", case=f"{rows}x{cols}", dtype=np.dtype(dtype).name
        )
      records += rs
      del x, dy
  # Cross-entropy (mean over rows): forward reads the logits once; the
  # backward reads them and writes dlogits.
  for rows, cols in cases if ops is None or "cross_entropy" in ops else []:
    k = jax.random.split(jax.random.key(rows * cols), 2)
    x = (3.0 * jax.random.normal(k[0], (rows, cols), jnp.float32)).astype(dtype)
    labels = jax.random.randint(k[1], (rows,), 0, cols)
    item = np.dtype(dtype).itemsize
    nb_f, nb_b = rows * cols * item, 2 * rows * cols * item
    ce = jaxdnn.softmax_cross_entropy
    rs = _loss_jax_rows("jaxdnn", lambda x, y: ce(x, y), x, labels, nb_f, nb_b)
    if want("xla"):
      f = lambda x, y: ce(x, y, implementation="xla")
      rs += _loss_jax_rows("xla", f, x, labels, nb_f, nb_b)
    if on_gpu and with_torch and want("torch"):
      rs += _loss_torch_rows(x, labels, nb_f, nb_b)
    if on_gpu and want("liger") and liger.ops() is not None:
      rs += _loss_torch_rows(x, labels, nb_f, nb_b, name="liger")
    for r in rs:
      r.update(op="cross_entropy", case=f"{rows}x{cols}", dtype=np.dtype(dtype).name)
    records += rs
    del x
  return records


def main(argv=None):
  return memory_bound.main("softmax", run, argv)
