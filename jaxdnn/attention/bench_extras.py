"""Issue 24's cases in the attention harness (`--only extras`): a learned
bias [1, H, T, T] (its gradient included), softmax sinks (their gradient
included) and MLA (query/key head dim 192, value 128), each jaxdnn against
cuDNN through jax.nn where it can express the case, PyTorch's SDPA for MLA.
b2 x 4096 tokens, 16 heads, bfloat16, causal and not."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import jaxdnn
from jaxdnn.bench import timing

HEADS = 16


def _timed(records, case, impl, f, args, flops, diff=None):
  """Forward, then forward+backward with the gradient of the first `diff`
  arguments (default: every one)."""
  from jaxdnn.attention.bench import _record

  fwd = jax.jit(f)
  argnums = tuple(range(len(args) if diff is None else diff))
  grad = jax.jit(jax.grad(lambda *a: jnp.sum(f(*a).astype(jnp.float32)), argnums=argnums))
  for direction, fn, mult in (("fwd", fwd, 1.0), ("fwd+bwd", grad, 3.5)):
    try:
      t = timing.time_jax(fn, *args, warmup=2, repeats=7)
      b = timing.busy_jax(fn, *args, calls=5)
      records.append(_record("attention", case, direction, impl, t, mult * flops, b))
    except Exception as e:  # noqa: BLE001 - an anchor refusing a case is a row, not a crash
      records.append(
        dict(op="attention", case=case, direction=direction, impl=impl, error=str(e)[:160])
      )


def _torch_mla(records, case, q, k, v, causal, flops):
  try:
    import torch.nn.functional as F
  except Exception:  # noqa: BLE001
    return
  from jaxdnn.attention.bench import _record, torch_qkv

  tq, tk, tv = (t.requires_grad_(True) for t in torch_qkv(q, k, v))
  fwd = lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

  def fb():
    F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).sum().backward()

  for direction, fn, mult in (("fwd", fwd, 1.0), ("fwd+bwd", fb, 3.5)):
    try:
      t = timing.time_torch(fn, warmup=2, repeats=7, calls=3)
      records.append(_record("attention", case, direction, "torch", t, mult * flops))
    except Exception as e:  # noqa: BLE001
      records.append(
        dict(op="attention", case=case, direction=direction, impl="torch", error=str(e)[:160])
      )


def _with_array(name, causal):
  """jaxdnn's and cuDNN's (through jax.nn) attention of (q, k, v, x) with x
  passed as `name` (bias or mask)."""
  return {
    "jaxdnn": lambda q, k, v, x: jaxdnn.dot_product_attention(
      q, k, v, is_causal=causal, **{name: x}
    ),
    "cudnn": lambda q, k, v, x: jax.nn.dot_product_attention(
      q, k, v, is_causal=causal, implementation="cudnn", **{name: x}
    ),
  }


def _bias_case(records, normal, batch, seq, causal, bias_batch, print_case):
  """A learned bias [bias_batch, H, T, T] at head dim 128: jaxdnn and cuDNN."""
  q, k, v = (normal((batch, seq, HEADS, 128)) for _ in range(3))
  flops = 4 * batch * HEADS * seq * seq * 128 / (2 if causal else 1)
  bias = normal((bias_batch, HEADS, seq, seq)) * 0.5
  shape = "1HTT" if bias_batch == 1 else "BHTT"
  case = f"bias{shape} b{batch}s{seq}d128{'c' if causal else ''}"
  for impl, f in _with_array("bias", causal).items():
    _timed(records, case, impl, f, (q, k, v, bias), flops)
  print_case and print_case(records, case)


def bias_grid(records, seqs=(1024, 2048, 4096, 8192), batch=2, print_case=None):
  """Issue 24's bias table: [1, H, T, T] and [B, H, T, T], causal and not."""
  keys = iter(jax.random.split(jax.random.PRNGKey(25), 4 * 2 * 2 * len(seqs) + 1))
  normal = lambda shape, dtype=jnp.bfloat16: jax.random.normal(next(keys), shape, dtype)
  for seq in seqs:
    for bias_batch in (1, batch):
      for causal in (False, True):
        _bias_case(records, normal, batch, seq, causal, bias_batch, print_case)


def _mask_case(records, normal, batch, seq, causal, kind, print_case):
  """A boolean mask at head dim 128, its gradient not wanted: "B1TT" (each
  pair kept with probability 0.9) or "B11T" (key padding: sequence b keeps
  its first seq * (1 - b / (2 batch)) keys). jaxdnn and cuDNN through
  jax.nn (which adds it as a bias)."""
  q, k, v = (normal((batch, seq, HEADS, 128)) for _ in range(3))
  flops = 4 * batch * HEADS * seq * seq * 128 / (2 if causal else 1)
  if kind == "B1TT":
    mask = normal((batch, 1, seq, seq), jnp.float32) > -1.2816  # ~0.9 kept
  else:
    kept = jnp.array([seq - seq * b // (2 * batch) for b in range(batch)])
    mask = (jnp.arange(seq)[None, :] < kept[:, None])[:, None, None, :]
  case = f"mask{kind} b{batch}s{seq}d128{'c' if causal else ''}"
  for impl, f in _with_array("mask", causal).items():
    _timed(records, case, impl, f, (q, k, v, mask), flops, diff=3)
  print_case and print_case(records, case)


def mask_grid(records, seqs=(1024, 2048, 4096, 8192), batch=2, print_case=None):
  """Boolean masks [B, 1, T, T] and [B, 1, 1, T], causal and not."""
  keys = iter(jax.random.split(jax.random.PRNGKey(26), 4 * 2 * 2 * len(seqs) + 1))
  normal = lambda shape, dtype=jnp.bfloat16: jax.random.normal(next(keys), shape, dtype)
  for seq in seqs:
    for kind in ("B1TT", "B11T"):
      for causal in (False, True):
        _mask_case(records, normal, batch, seq, causal, kind, print_case)


def extras(records, with_torch, seq=4096, batch=2, print_case=None):
  keys = iter(jax.random.split(jax.random.PRNGKey(24), 16))
  normal = lambda shape, dtype=jnp.bfloat16: jax.random.normal(next(keys), shape, dtype)
  for causal in (False, True):
    tag = "c" if causal else ""
    q, k, v = (normal((batch, seq, HEADS, 128)) for _ in range(3))
    flops = 4 * batch * HEADS * seq * seq * 128 / (2 if causal else 1)
    _bias_case(records, normal, batch, seq, causal, 1, print_case)
    sinks = normal((HEADS,), jnp.float32)
    case = f"sinks b{batch}s{seq}d128{tag}"
    for name, f, args in (
      (
        "jaxdnn",
        lambda q, k, v, s: jaxdnn.dot_product_attention(q, k, v, sinks=s, is_causal=causal),
        (q, k, v, sinks),
      ),
      (
        "nosinks",
        lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, is_causal=causal),
        (q, k, v),
      ),
    ):
      _timed(records, case, name, f, args, flops)
    print_case and print_case(records, case)
    _mla_case(records, normal, batch, seq, causal, with_torch, print_case)


def _mla_case(records, normal, batch, seq, causal, with_torch, print_case, dims=(192, 128)):
  """MLA (query/key head dim dims[0], value dims[1]): jaxdnn, cuDNN through
  jax.nn (an error row where it refuses) and PyTorch's SDPA."""
  dqk, dv = dims
  qm, km = normal((batch, seq, HEADS, dqk)), normal((batch, seq, HEADS, dqk))
  vm = normal((batch, seq, HEADS, dv))
  flops_mla = 2 * batch * HEADS * seq * seq * (dqk + dv) / (2 if causal else 1)
  case = f"mla{dqk}/{dv} b{batch}s{seq}{'c' if causal else ''}"
  for name, impl in (("jaxdnn", None), ("cudnn", "cudnn")):
    f = (
      (lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, is_causal=causal))
      if impl is None
      else (
        lambda q, k, v: jax.nn.dot_product_attention(
          q, k, v, is_causal=causal, implementation="cudnn"
        )
      )
    )
    _timed(records, case, name, f, (qm, km, vm), flops_mla)
  if with_torch:
    _torch_mla(records, case, qm, km, vm, causal, flops_mla)
  print_case and print_case(records, case)


def mla_grid(
  records,
  with_torch,
  seqs=(2048, 4096, 8192, 16384),
  tokens=16384,
  print_case=None,
  dims=((192, 128),),
):
  """Issue 24's MLA table: batch x seq = `tokens`, causal and not, for each
  (query/key, value) head dim pair in `dims`."""
  keys = iter(jax.random.split(jax.random.PRNGKey(26), 3 * 2 * len(seqs) * len(dims) + 1))
  normal = lambda shape, dtype=jnp.bfloat16: jax.random.normal(next(keys), shape, dtype)
  for pair in dims:
    for seq in seqs:
      for causal in (False, True):
        _mla_case(
          records, normal, max(1, tokens // seq), seq, causal, with_torch, print_case, dims=pair
        )
