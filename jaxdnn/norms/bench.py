"""LayerNorm / RMSNorm: jaxdnn against XLA, Pallas, tokamax and PyTorch in one process.

Bytes counted: forward reads x and writes y; backward reads x and dy and
writes dx (the parameters are negligible). Backward time is measured two
ways: the jaxdnn backward primitive alone ("bwd_kernel"), and for every
implementation (fwd+bwd) - fwd ("bwd"). JAX timings go through
timing.time_jax_chained: one application per jit call by default (calls
queued back to back), or a chain of N (`--chain N`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn
from jaxdnn.bench import memory_bound, timing
from jaxdnn.bench.timing import time_jax_chained, time_torch
from jaxdnn.norms.primitives import norm_backward, norm_forward

CASES = [(32768, 4096), (8192, 8192), (16384, 1024), (4096, 12288)]


def _fn(kind, impl):
  if kind == "layer":
    return lambda x, s, b: jaxdnn.layer_norm(x, s, b, implementation=impl)
  return lambda x, s, b: jaxdnn.rms_norm(x, s, implementation=impl)


def _pallas_fn(kind):
  """jax's Pallas (Triton) norms take [batch, seq, features] (they vmap twice),
  so the rows go in as one batch; its RMSNorm also adds a bias (zeros here)."""
  try:
    if kind == "layer":
      from jax.experimental.pallas.ops.gpu import layer_norm as m

      return lambda x, s, b: m.layer_norm(x[None], s, b)[0]
    from jax.experimental.pallas.ops.gpu import rms_norm as m

    return lambda x, s, b: m.rms_norm(x[None], s, jnp.zeros_like(s) if b is None else b)[0]
  except Exception:  # noqa: BLE001 - an anchor that cannot import is reported as such
    return None


def _tokamax_fn(kind, implementation=None):
  """tokamax (openxla's Pallas kernels), the JAX-native peer, when installed."""
  try:
    import tokamax
  except Exception:  # noqa: BLE001 - not installed: the anchor is skipped
    return None
  kw = dict(epsilon=1e-5, implementation=implementation)
  if kind == "layer":
    return lambda x, s, b: tokamax.layer_norm(x, s, b, **kw)
  return lambda x, s, b: tokamax.layer_norm(x, s, None, subtract_mean=False, **kw)


def _jax_rows(kind, name, f, inputs, nbytes_fwd, nbytes_bwd):
  x, s, b, dy = inputs

  def fwd_bwd(state):
    # One training step's worth: y and all three gradients; y and dx feed
    # the next step's x and dy; ds and db ride along (no extra passes).
    x, dy, _, _ = state
    y, vjp = jax.vjp(f, x, s, b)
    dx, ds, db = vjp(dy)
    return y, dx, ds, db

  try:
    t_f = time_jax_chained(lambda x: f(x, s, b), x)
    t_fb = time_jax_chained(fwd_bwd, (x, dy, s, b))
    b_f = timing.busy_jax(jax.jit(lambda x: f(x, s, b)), x)
    b_fb = timing.busy_jax(jax.jit(fwd_bwd), (x, dy, s, b))
  except Exception as e:  # noqa: BLE001
    return [dict(impl=name, error=f"{type(e).__name__}: {str(e)[:200]}")]
  return memory_bound.direction_rows(name, t_f, t_fb, nbytes_fwd, nbytes_bwd, b_f, b_fb)


def _jaxdnn_bwd_kernel(kind, inputs, nbytes_bwd):
  layer = kind == "layer"
  x, s, b, dy = inputs
  outs = norm_forward.bind(
    *([x, s] + ([b] if layer else [])), kind=kind, epsilon=1e-5, residual=False, implementation=None
  )
  stats = ([outs[1]] if layer else []) + [outs[-1]]

  def step(state):  # dx of one step is the next step's dy
    outs = norm_backward.bind(
      state[0], x, s, *stats, kind=kind, residual=False, implementation=None
    )
    return outs[0], outs[1]

  t = time_jax_chained(step, (dy, s))
  busy = timing.busy_jax(jax.jit(step), (dy, s))
  return memory_bound.row("jaxdnn", "bwd_kernel", t, nbytes_bwd, busy)


def _torch_rows(kind, x, s, b, dy, nbytes_fwd, nbytes_bwd):
  try:
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
      return []
    dtype = getattr(torch, np.dtype(x.dtype).name)  # torch's parameters in x's dtype
    tx = torch.from_numpy(np.array(x.astype(jnp.float32))).cuda().to(dtype)
    tdy = torch.from_numpy(np.array(dy.astype(jnp.float32))).cuda().to(dtype)
    ts = torch.from_numpy(np.asarray(s)).cuda().to(dtype)
    tb = torch.from_numpy(np.asarray(b)).cuda().to(dtype)
    dim = tx.shape[-1]
    if kind == "layer":
      fwd = lambda x: F.layer_norm(x, (dim,), ts, tb, 1e-5)
    else:
      fwd = lambda x: F.rms_norm(x, (dim,), ts, 1e-5)
    with torch.no_grad():
      t_f = time_torch(lambda: fwd(tx))
      b_f = timing.busy_torch(lambda: fwd(tx))
    txg = tx.clone().requires_grad_(True)

    def fb():
      y = fwd(txg)
      y.backward(tdy)
      txg.grad = None

    t_fb = time_torch(fb)
    b_fb = timing.busy_torch(fb)
  except Exception as e:  # noqa: BLE001
    return [dict(impl="torch", error=f"{type(e).__name__}: {str(e)[:200]}")]
  return memory_bound.direction_rows("torch", t_f, t_fb, nbytes_fwd, nbytes_bwd, b_f, b_fb)


def _inputs(rows, dim, dtype):
  k = jax.random.split(jax.random.key(rows + dim), 4)
  return (
    jax.random.normal(k[0], (rows, dim), dtype),
    1.0 + 0.1 * jax.random.normal(k[2], (dim,), jnp.float32),
    0.1 * jax.random.normal(k[3], (dim,), jnp.float32),
    jax.random.normal(k[1], (rows, dim), dtype),
  )


def run(cases=CASES, dtype=jnp.bfloat16, with_torch=True, impls=None, ops=None):
  records = []
  on_gpu = jax.default_backend() == "gpu"
  for kind in ("layer", "rms"):
    if ops is not None and f"{kind}_norm" not in ops:
      continue
    for rows, dim in cases:
      inputs = _inputs(rows, dim, dtype)
      x, s, b, dy = inputs
      item = np.dtype(dtype).itemsize
      nb_f, nb_b = 2 * rows * dim * item, 3 * rows * dim * item
      case = f"{rows}x{dim}"
      want = lambda name: impls is None or name in impls
      rs = []
      rs += _jax_rows(kind, "jaxdnn", _fn(kind, None), inputs, nb_f, nb_b)
      rs.append(_jaxdnn_bwd_kernel(kind, inputs, nb_b))
      if want("xla"):
        rs += _jax_rows(kind, "xla", _fn(kind, "xla"), inputs, nb_f, nb_b)
      if on_gpu:
        pf = _pallas_fn(kind) if want("pallas") else None
        if pf is not None:
          rs += _jax_rows(kind, "pallas", pf, inputs, nb_f, nb_b)
        for name, impl in (("tokamax", None), ("tokamax_triton", "triton")):
          tf = _tokamax_fn(kind, impl) if want(name) else None
          if tf is not None:
            rs += _jax_rows(kind, name, tf, inputs, nb_f, nb_b)
        if with_torch and want("torch"):
          rs += _torch_rows(kind, x, s, b, dy, nb_f, nb_b)
      for r in rs:
        r.update(op=f"{kind}_norm", case=case, dtype=np.dtype(dtype).name)
      records += rs
      del inputs, x, s, b, dy
  return records


def main(argv=None):
  return memory_bound.main("norms", run, argv)
