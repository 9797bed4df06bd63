"""bias_act and glu: jaxdnn against XLA and PyTorch in one process.

Bytes counted (the minimum traffic), per element of the output:
  bias_act forward reads x, writes y; backward reads dy and x, writes dx
  (the bias and its gradient are one row: not counted);
  glu forward reads value and gate, writes out; backward reads dout, value
  and gate, writes dvalue and dgate.
Backward time is (fwd+bwd) - fwd, as for the other memory-bound families.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn
from jaxdnn.bench import liger, memory_bound
from jaxdnn.bench.memory_bound import jax_rows, torch_rows

# Issue 27's grid: rows x features of 256 MiB and more in bfloat16, and the
# GLU at 16384 x 2 x 14336 (a Llama-3-8B MLP's gate and up projections).
BIAS_CASES = [(32768, 4096), (8192, 14336), (16384, 32768)]
GLU_CASES = [(16384, 14336), (32768, 4096)]
BIAS_ACTS = ("gelu", "silu")
GLU_ACTS = ("silu", "gelu")


def _torch_act(torch, name):
  F = torch.nn.functional
  return {"gelu": lambda z: F.gelu(z, approximate="tanh"), "silu": F.silu}[name]


def run(cases=None, dtype=jnp.bfloat16, with_torch=True, impls=None, ops=None):
  """`cases` (rows, cols) replace both grids (a GLU case is rows x 2 x cols)."""
  records = []
  on_gpu = jax.default_backend() == "gpu"
  want = lambda name: impls is None or name in impls
  item = np.dtype(dtype).itemsize
  for act in BIAS_ACTS if ops is None or "bias_act" in ops else ():
    for rows, cols in cases or BIAS_CASES:
      k = jax.random.split(jax.random.key(rows + cols), 3)
      x = (2.0 * jax.random.normal(k[0], (rows, cols), jnp.float32)).astype(dtype)
      b = jax.random.normal(k[1], (cols,), dtype)
      cot = jax.random.normal(k[2], (rows, cols), dtype)
      nb_f, nb_b = 2 * rows * cols * item, 3 * rows * cols * item
      f = lambda i: lambda x, b: jaxdnn.bias_act(x, b, activation=act, implementation=i)
      rs = jax_rows("jaxdnn", f(None), (x, b), cot, nb_f, nb_b)
      if want("xla"):
        rs += jax_rows("xla", f("xla"), (x, b), cot, nb_f, nb_b)
      if on_gpu and with_torch and want("torch"):
        rs += torch_rows(
          lambda torch: lambda x, b: _torch_act(torch, act)(x + b), (x, b), cot, nb_f, nb_b
        )
      for r in rs:
        r.update(op=f"bias_{act}", case=f"{rows}x{cols}", dtype=np.dtype(dtype).name)
      records += rs
      del x, cot
  for act in GLU_ACTS if ops is None or "glu" in ops else ():
    for rows, cols in cases or GLU_CASES:
      k = jax.random.split(jax.random.key(rows * cols), 2)
      x = (2.0 * jax.random.normal(k[0], (rows, 2 * cols), jnp.float32)).astype(dtype)
      cot = jax.random.normal(k[1], (rows, cols), dtype)
      nb_f, nb_b = 3 * rows * cols * item, 5 * rows * cols * item
      f = lambda i: lambda x: jaxdnn.glu(x, activation=act, implementation=i)
      rs = jax_rows("jaxdnn", f(None), (x,), cot, nb_f, nb_b)
      if want("xla"):
        rs += jax_rows("xla", f("xla"), (x,), cot, nb_f, nb_b)
      if on_gpu and with_torch and want("torch"):

        def torch_glu(torch):
          a = _torch_act(torch, act)
          return lambda x: x[:, :cols] * a(x[:, cols:])

        rs += torch_rows(torch_glu, (x,), cot, nb_f, nb_b)
      lg = liger.glu(act) if on_gpu and want("liger") else None
      if lg is not None:  # Liger takes value and gate as separate tensors
        rs += torch_rows(lg, (x[:, :cols], x[:, cols:]), cot, nb_f, nb_b, name="liger")
      for r in rs:
        r.update(op=f"glu_{act}", case=f"{rows}x2x{cols}", dtype=np.dtype(dtype).name)
      records += rs
      del x, cot
  return records


def main(argv=None):
  return memory_bound.main("activations", run, argv)
