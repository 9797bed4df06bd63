"""python -m jaxdnn.bench rnn: jaxdnn.rnn against a lax.scan, jax.experimental.rnn
and PyTorch's nn.LSTM / nn.GRU, side by side in one process.

  python -m jaxdnn.bench rnn [--quick] [--modes lstm,gru] [--batches 1,8] [--hiddens 1024]
                             [--steps 256] [--dtypes bfloat16] [--impls jaxdnn,scan] [--out f.json]

Anchors: "scan" is jaxdnn.rnn(implementation="xla"), the same model as a
lax.scan over the steps after one input-projection GEMM (what a JAX user
writes); "jax_rnn" is jax.experimental.rnn.lstm (cuDNN through JAX: LSTM,
float32, GPU only; its own random weights of the same shapes); "torch" is
nn.LSTM / nn.GRU (cuDNN on a GPU) in the case's dtype, loaded with
layout.to_torch of jaxdnn's weights, so the same model runs.

Cases: issue 28's grid: LSTM and GRU, batch 1, 8, 64, 256, hidden 256, 1024,
2048 (input = hidden), 256 and 1024 steps, one layer, one direction,
forward and forward+backward (gradients of the inputs and every weight), in
bfloat16, and the LSTM in float32 too (jax.experimental.rnn's dtype).

FLOPs counted: the two GEMMs of every step, 2 * steps * batch * (input +
hidden) * gates * hidden for the forward; the backward computes the data and
weight gradients (2x the forward), so forward+backward counts 3x. Times are
host-timed medians (and GPU-busy with --gpu-busy); speedups are anchor
time / jaxdnn time, and the summary their geometric means.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn
from jaxdnn import _extension
from jaxdnn.bench import timing
from jaxdnn.bench.ratios import add_ratios
from jaxdnn.recurrent import layout

MODES = ("lstm", "gru")
BATCHES = (1, 8, 64, 256)
HIDDENS = (256, 1024, 2048)
STEPS = (256, 1024)
DIRECTIONS = ("fwd", "fwd+bwd")
IMPLS = ("jaxdnn", "scan", "jax_rnn", "torch")
# A CPU smoke run: every mode, direction and dtype at a toy size.
QUICK = dict(batches=(2,), hiddens=(16,), steps=(8,))


def flops(mode, batch, hidden, steps, input_size=None, direction="fwd"):
  fwd = 2 * steps * batch * ((input_size or hidden) + hidden) * layout.GATES[mode] * hidden
  return fwd * (3 if direction == "fwd+bwd" else 1)


def grid(modes=MODES, batches=BATCHES, hiddens=HIDDENS, steps=STEPS, dtypes=None):
  """(mode, batch, hidden, steps, dtype) cases. dtypes=None: bfloat16, and
  float32 for the LSTM (the one case jax.experimental.rnn runs)."""
  cases = []
  for dtype in dtypes or ("bfloat16", "float32"):
    for mode in modes:
      if dtypes is None and dtype == "float32" and mode != "lstm":
        continue
      for s in steps:
        for h in hiddens:
          cases += [(mode, b, h, s, dtype) for b in batches]
  return cases


def _sized_calls(call, wait, target=0.02):
  """Calls per sample so a sample spans about `target` seconds (one for a long
  case), from one call after two warm-ups (the first compiles)."""
  for _ in range(2):
    wait(call())
  t0 = time.perf_counter()
  wait(call())
  return int(min(50, max(1, target / max(time.perf_counter() - t0, 1e-7))))


def _time_jax(fn, *args, repeats):
  calls = _sized_calls(lambda: fn(*args), jax.block_until_ready)
  return timing.time_jax(fn, *args, warmup=0, repeats=repeats, calls=calls)


def _record(case, direction, impl, t, busy=None):
  mode, b, h, s, dtype = case
  f = flops(mode, b, h, s, direction=direction)
  r = dict(
    op=mode, case=f"b{b} h{h} t{s} {dtype}", direction=direction, impl=impl,
    batch=b, hidden=h, steps=s, dtype=dtype, flops=f, time_us=t * 1e6, tflops=f / t / 1e12,
  )  # fmt: skip
  if busy:
    r.update(gpu_us=busy * 1e6, gpu_tflops=f / busy / 1e12)
  return r


def _error(case, direction, impl, e):
  mode, b, h, s, dtype = case
  msg = e if isinstance(e, str) else f"{type(e).__name__}: {e}"
  return dict(
    op=mode, case=f"b{b} h{h} t{s} {dtype}", direction=direction, impl=impl, error=msg[:200]
  )


def _fwd_and_grad(f):
  """f(x, w) -> outputs, and the step that also runs the backward of
  <outputs, cot> to x and every weight."""

  def step(x, w, cot):
    y, vjp = jax.vjp(f, x, w)
    return y, vjp(cot)

  return jax.jit(f), jax.jit(step)


def _jax_rows(case, directions, impl, x, params, cot, repeats):
  mode, b, h, s, dtype = case
  if impl == "jax_rnn":
    from jax.experimental import rnn as jrnn

    w = jrnn.init_lstm_weight(jax.random.key(3), h, h, 1, False)
    h0 = jnp.zeros((1, b, h), jnp.float32)
    lengths = jnp.full((b,), s, jnp.int32)
    f = lambda x, w: jrnn.lstm(x, h0, h0, w, lengths, h, h, 1, 0.0, False)[0]
  else:
    w = params
    # jaxdnn on a GPU is its CUDA kernel or an error, never a silent scan.
    on_gpu = jax.default_backend() == "gpu"
    which = ("cuda" if on_gpu else None) if impl == "jaxdnn" else "xla"
    f = lambda x, w: jaxdnn.rnn(x, w, mode=mode, implementation=which)[0]
  fwd, step = _fwd_and_grad(f)
  rows = []
  for direction in directions:
    fn, args = (fwd, (x, w)) if direction == "fwd" else (step, (x, w, cot))
    try:
      t = _time_jax(fn, *args, repeats=repeats)
      rows.append(_record(case, direction, impl, t, timing.busy_jax(fn, *args)))
    except Exception as e:  # noqa: BLE001 - reported in the table
      rows.append(_error(case, direction, impl, e))
  return rows


def _time_torch_host(fn, repeats):
  """Median host seconds per call of a CPU PyTorch callable."""
  calls = _sized_calls(fn, lambda _: None)
  samples = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    for _ in range(calls):
      fn()
    samples.append((time.perf_counter() - t0) / calls)
  return statistics.median(samples)


def _torch_rows(case, directions, x, params, cot, repeats):
  mode, b, h, s, dtype = case
  import torch

  cuda = jax.default_backend() == "gpu" and torch.cuda.is_available()
  dev, tdt = ("cuda" if cuda else "cpu"), getattr(torch, dtype)
  to = lambda a: torch.from_numpy(np.array(a, np.float32)).to(dev, tdt)
  model = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[mode](h, h, batch_first=True)
  model = model.to(dev, tdt)
  model.load_state_dict({k: to(v) for k, v in layout.to_torch(params).items()})
  # One contiguous weight buffer, as cuDNN wants: without it every call
  # compacts the weights first (PyTorch warns), which is not cuDNN's speed.
  model.flatten_parameters()
  xt, ct = to(x), to(cot)
  xg = xt.clone().requires_grad_(True)

  def fwd():
    with torch.no_grad():
      return model(xt)[0]

  def fwd_bwd():
    model(xg)[0].backward(ct)
    xg.grad = None
    model.zero_grad(set_to_none=True)

  rows = []
  for direction in directions:
    fn = fwd if direction == "fwd" else fwd_bwd
    try:
      if cuda:
        calls = _sized_calls(fn, lambda _: torch.cuda.synchronize())
        t = timing.time_torch(fn, warmup=0, repeats=repeats, calls=calls)
        rows.append(_record(case, direction, "torch", t, timing.busy_torch(fn)))
      else:
        rows.append(_record(case, direction, "torch", _time_torch_host(fn, repeats)))
    except Exception as e:  # noqa: BLE001
      rows.append(_error(case, direction, "torch", e))
  return rows


def _free_torch_cache():
  """Hands PyTorch's cached GPU memory back (after its tensors went out of
  scope), so XLA's allocations of the next case find it."""
  import torch

  if torch.cuda.is_available():
    torch.cuda.empty_cache()


def _torch_importable():
  try:
    import torch  # noqa: F401
  except Exception:  # noqa: BLE001 - not installed: the anchor is skipped
    return False
  return True


def anchors_available(impls):
  """{impl: None if it runs here, else why not} for the anchors asked for."""
  on_gpu = jax.default_backend() == "gpu"
  why = {}
  if "jaxdnn" in impls and on_gpu and not _extension.has_cuda_target("jaxdnn_rnn_fwd"):
    why["jaxdnn"] = "this build has no CUDA recurrence kernel"
  if "jax_rnn" in impls and not on_gpu:
    why["jax_rnn"] = "jax.experimental.rnn runs on cuDNN only (GPU)"
  if "torch" in impls and not _torch_importable():
    why["torch"] = "PyTorch is not importable"
  return {i: why.get(i) for i in impls}


def run(cases, directions=DIRECTIONS, impls=IMPLS, repeats=10, progress=None):
  """The records; `progress(records)` after each case (to print and save as
  the run goes: a device call may be cut off)."""
  avail = anchors_available(impls)
  records = []
  for case in cases:
    mode, b, h, s, dtype = case
    k = jax.random.split(jax.random.key(b * 7919 + h * 31 + s), 3)
    params = layout.init_params(k[0], mode, h, h, dtype=jnp.dtype(dtype))
    x = jax.random.normal(k[1], (b, s, h), jnp.float32).astype(dtype)
    cot = jax.random.normal(k[2], (b, s, h), jnp.float32).astype(dtype)
    for impl in impls:
      if impl == "jax_rnn" and (mode, dtype) != ("lstm", "float32"):
        continue  # LSTM in float32 only (bfloat16 raises NotImplementedError)
      if avail[impl] is not None:
        if impl == "jaxdnn":  # a row per case: the grid shows what is missing
          records += [_error(case, d, impl, avail[impl]) for d in directions]
        continue
      try:
        if impl == "torch":
          records += _torch_rows(case, directions, x, params, cot, repeats)
          _free_torch_cache()
        else:
          records += _jax_rows(case, directions, impl, x, params, cot, repeats)
      except Exception as e:  # noqa: BLE001 - e.g. out of memory building the case
        records += [_error(case, d, impl, e) for d in directions]
    del params, x, cot
    if progress:
      progress(records)
  return records


def summary(records):
  """Geometric means (and minimum) of jaxdnn's speedup against each anchor,
  per mode, dtype and direction, over every case and over batch <= 8: from
  host-timed medians, and ("GPU-busy") from the GPU-busy times where measured."""
  out = {}
  for r in records:
    if r.get("impl") != "jaxdnn":
      continue
    for field, tag in (("speedup_vs", ""), ("gpu_speedup_vs", " GPU-busy")):
      for anchor, ratio in r.get(field, {}).items():
        for part in ("all",) + (("batch<=8",) if r["batch"] <= 8 else ()):
          key = f"{r['op']} {r['dtype']} {r['direction']} vs {anchor}{tag} ({part})"
          out.setdefault(key, []).append(ratio)
  return {
    k: dict(geomean=math.exp(sum(map(math.log, v)) / len(v)), min=min(v), cases=len(v))
    for k, v in out.items()
  }


def print_table(records, header=True):
  hdr = f"{'mode':<6}{'case':<26}{'dir':<9}{'impl':<9}{'ms':>10}{'TFLOP/s':>9}  speedup"
  if header:
    print(hdr)
    print("-" * len(hdr))
  for r in records:
    head = f"{r['op']:<6}{r['case']:<26}{r['direction']:<9}{r['impl']:<9}"
    if "error" in r:
      print(f"{head} {r['error'][:90]}", flush=True)
      continue
    sp = " ".join(f"{k}:{v:.2f}x" for k, v in r.get("speedup_vs", {}).items())
    busy = f"  | GPU-busy {r['gpu_us'] / 1e3:.3f} ms" if r.get("gpu_us") else ""
    print(f"{head}{r['time_us'] / 1e3:>10.3f}{r['tflops']:>9.3f}  {sp}{busy}", flush=True)


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  ap = argparse.ArgumentParser(prog="python -m jaxdnn.bench rnn")
  ap.add_argument("--out", "--json", dest="out", help="write the records as JSON here")
  ap.add_argument("--quick", action="store_true", help="toy sizes (a CPU smoke run, seconds)")
  ints = lambda s: tuple(int(v) for v in s.split(","))
  names = lambda s: tuple(s.split(","))
  ap.add_argument("--modes", type=names, default=MODES, help="lstm,gru")
  ap.add_argument("--batches", type=ints, help="default 1,8,64,256")
  ap.add_argument("--hiddens", type=ints, help="default 256,1024,2048 (input = hidden)")
  ap.add_argument("--steps", type=ints, help="default 256,1024")
  ap.add_argument("--dtypes", type=names, help="default bfloat16, and float32 for the LSTM")
  ap.add_argument("--directions", type=names, default=DIRECTIONS, help="fwd,fwd+bwd")
  ap.add_argument("--impls", type=names, default=IMPLS, help="jaxdnn,scan,jax_rnn,torch")
  ap.add_argument("--repeats", type=int, help="timed samples per row (default 10; --quick 3)")
  ap.add_argument("--gpu-busy", action="store_true", help="also GPU-busy time (CUPTI, PyTorch)")
  args = ap.parse_args(argv)
  timing.MODE["gpu_busy"] = args.gpu_busy
  sizes = dict(QUICK) if args.quick else {}
  for k in ("batches", "hiddens", "steps"):
    if getattr(args, k):
      sizes[k] = getattr(args, k)
  cases = grid(args.modes, dtypes=args.dtypes, **sizes)
  repeats = args.repeats or (3 if args.quick else 10)
  device = jax.devices()[0]
  print(f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}")
  notes = {i: why for i, why in anchors_available(args.impls).items() if why}
  for impl, why in notes.items():
    print(f"{impl}: not timed here: {why}")
  printed = [0]

  def progress(records):
    add_ratios(records)
    print_table(records[printed[0] :], header=printed[0] == 0)
    printed[0] = len(records)
    if args.out:
      with open(args.out, "w") as f:
        meta = dict(device=device.device_kind, backend=jax.default_backend(), jax=jax.__version__)
        json.dump(dict(meta, notes=notes, summary=summary(records), records=records), f, indent=1)

  records = run(cases, args.directions, args.impls, repeats, progress)
  progress(records)
  for key, s in summary(records).items():
    print(f"{key}: geomean {s['geomean']:.2f}x, min {s['min']:.2f}x over {s['cases']} cases")
  return 0
