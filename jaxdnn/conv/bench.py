"""python -m jaxdnn.bench conv: convolutions against XLA's (which calls
cuDNN with its autotuning) and PyTorch's cuDNN (channels-last,
torch.backends.cudnn.benchmark=True), side by side in one process.

Cases: issue 25's list: every distinct convolution of ResNet-50 at batch 128
(forward, forward + bias + ReLU, forward + backward), depthwise 3x3 at
dilations 1, 2, 4, grouped (32) 3x3, transposed 4x4 stride 2, a 3D 3x3x3
video layer and its transposed convolution's gradient, 1D audio layers
(kernel 3 and 1024), a diffusion-UNet 3x3 at 64x64x320.

FLOPs counted: 2 x multiply-adds of every tap (padding included) for the
forward; the backward adds the data and the weight gradient (2 x forward).
Times are host-timed medians (and GPU-busy with --gpu-busy); speedups are
anchor time / jaxdnn time. Where jaxdnn has no CUDA kernel for a case its
row says so instead of timing XLA twice.
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn
from jaxdnn import _extension
from jaxdnn.bench import timing
from jaxdnn.bench.ratios import add_ratios
from jaxdnn.conv import geometry

# name, x shape (channels-last), w shape [*window, C_in/g, C_out], kwargs, modes
_R50 = [
  ("r50 stem 7x7 s2", (128, 224, 224, 3), (7, 7, 3, 64), dict(strides=2, padding=((3, 3), (3, 3)))),
  ("r50 1x1 56 64->64", (128, 56, 56, 64), (1, 1, 64, 64), {}),
  ("r50 3x3 56 64->64", (128, 56, 56, 64), (3, 3, 64, 64), {}),
  ("r50 1x1 56 64->256", (128, 56, 56, 64), (1, 1, 64, 256), {}),
  ("r50 1x1 56 256->64", (128, 56, 56, 256), (1, 1, 256, 64), {}),
  ("r50 1x1 56 256->128", (128, 56, 56, 256), (1, 1, 256, 128), {}),
  ("r50 3x3 s2 56 128->128", (128, 56, 56, 128), (3, 3, 128, 128), dict(strides=2)),
  ("r50 1x1 28 128->512", (128, 28, 28, 128), (1, 1, 128, 512), {}),
  ("r50 1x1 s2 56 256->512", (128, 56, 56, 256), (1, 1, 256, 512), dict(strides=2)),
  ("r50 1x1 28 512->128", (128, 28, 28, 512), (1, 1, 512, 128), {}),
  ("r50 3x3 28 128->128", (128, 28, 28, 128), (3, 3, 128, 128), {}),
  ("r50 1x1 28 512->256", (128, 28, 28, 512), (1, 1, 512, 256), {}),
  ("r50 3x3 s2 28 256->256", (128, 28, 28, 256), (3, 3, 256, 256), dict(strides=2)),
  ("r50 1x1 14 256->1024", (128, 14, 14, 256), (1, 1, 256, 1024), {}),
  ("r50 1x1 s2 28 512->1024", (128, 28, 28, 512), (1, 1, 512, 1024), dict(strides=2)),
  ("r50 1x1 14 1024->256", (128, 14, 14, 1024), (1, 1, 1024, 256), {}),
  ("r50 3x3 14 256->256", (128, 14, 14, 256), (3, 3, 256, 256), {}),
  ("r50 1x1 14 1024->512", (128, 14, 14, 1024), (1, 1, 1024, 512), {}),
  ("r50 3x3 s2 14 512->512", (128, 14, 14, 512), (3, 3, 512, 512), dict(strides=2)),
  ("r50 1x1 7 512->2048", (128, 7, 7, 512), (1, 1, 512, 2048), {}),
  ("r50 1x1 s2 14 1024->2048", (128, 14, 14, 1024), (1, 1, 1024, 2048), dict(strides=2)),
  ("r50 1x1 7 2048->512", (128, 7, 7, 2048), (1, 1, 2048, 512), {}),
  ("r50 3x3 7 512->512", (128, 7, 7, 512), (3, 3, 512, 512), {}),
]
_OTHER = [
  ("depthwise 3x3 56x56x256", (128, 56, 56, 256), (3, 3, 1, 256), dict(feature_group_count=256)),
  (
    "depthwise 3x3 dil2 56x56x256",
    (128, 56, 56, 256),
    (3, 3, 1, 256),
    dict(feature_group_count=256, kernel_dilation=2),
  ),
  (
    "depthwise 3x3 dil4 56x56x256",
    (128, 56, 56, 256),
    (3, 3, 1, 256),
    dict(feature_group_count=256, kernel_dilation=4),
  ),
  ("grouped32 3x3 28x28x256", (128, 28, 28, 256), (3, 3, 8, 256), dict(feature_group_count=32)),
  ("grouped32 3x3 14x14x512", (128, 14, 14, 512), (3, 3, 16, 512), dict(feature_group_count=32)),
  ("grouped32 3x3 7x7x1024", (128, 7, 7, 1024), (3, 3, 32, 1024), dict(feature_group_count=32)),
  ("transposed 4x4 s2 32x32 128->64", (64, 32, 32, 128), (4, 4, 128, 64), dict(transpose=2)),
  ("3D 3x3x3 16x56x56 64->64", (8, 16, 56, 56, 64), (3, 3, 3, 64, 64), {}),
  (
    "3D transposed 3x3x3 s2 8x28x28 64->64",
    (8, 8, 28, 28, 64),
    (3, 3, 3, 64, 64),
    dict(transpose=2),
  ),
  ("1D k3 16000 64->64", (32, 16000, 64), (3, 64, 64), {}),
  ("1D k1024 8192 64->64", (16, 8192, 64), (1024, 64, 64), {}),
  # Where the FFT overtakes the direct sum (fft.DEFAULT_MIN_TAPS).
  ("1D k64 8192 64->64", (16, 8192, 64), (64, 64, 64), {}),
  ("1D k128 8192 64->64", (16, 8192, 64), (128, 64, 64), {}),
  ("1D k256 8192 64->64", (16, 8192, 64), (256, 64, 64), {}),
  ("unet 3x3 64x64 320->320", (8, 64, 64, 320), (3, 3, 320, 320), {}),
]
CASES = [(n, x, w, kw, ("fwd", "fwd_bias_relu", "fwd+bwd")) for n, x, w, kw in _R50] + [
  (n, x, w, kw, ("fwd", "fwd+bwd")) for n, x, w, kw in _OTHER
]


def _flops(x_shape, w_shape, kw):
  if kw.get("transpose"):
    s = kw["transpose"]
    n = len(x_shape) - 2
    pads = geometry.transpose_pads("bench", "SAME", w_shape[:n], (s,) * n, (1,) * n)
    g, _ = geometry.make("bench", x_shape, w_shape, 1, pads, s, 1, 1)
    # Taps that land on the input's dilation holes are no work: / stride^n.
    return g.flops() // s**n
  g, _ = geometry.make(
    "bench",
    x_shape,
    w_shape,
    kw.get("strides", 1),
    kw.get("padding", "SAME"),
    1,
    kw.get("kernel_dilation", 1),
    kw.get("feature_group_count", 1),
  )
  return g.flops()


def _xla_fn(kw, mode):
  """The XLA anchor as a JAX user writes it (Flax's nn.Conv): lax's conv in
  the inputs' dtype, then bias and ReLU as jnp ops XLA may fuse."""
  kw = dict(kw)
  transpose = kw.pop("transpose", None)
  relu = mode == "fwd_bias_relu"

  def f(x, w, b):
    n = x.ndim - 2
    if transpose:
      dn = geometry.SPECS[n]
      y = jax.lax.conv_transpose(x, w, (transpose,) * n, "SAME", dimension_numbers=dn)
    else:
      pad = kw.get("padding", "SAME")
      y = jax.lax.conv_general_dilated(
        x,
        w,
        (kw.get("strides", 1),) * n,
        pad,
        rhs_dilation=(kw.get("kernel_dilation", 1),) * n,
        dimension_numbers=geometry.SPECS[n],
        feature_group_count=kw.get("feature_group_count", 1),
      )
    return jax.nn.relu(y + b) if relu else y

  return f


def _jax_fn(impl, kw, mode, algorithm=None):
  kw = dict(kw, **({"algorithm": algorithm} if algorithm else {}))
  transpose = kw.pop("transpose", None)
  extra = dict(activation="relu") if mode == "fwd_bias_relu" else {}
  if transpose:
    algo = {"algorithm": kw["algorithm"]} if "algorithm" in kw else {}
    return lambda x, w, b: jaxdnn.conv_transpose(
      x, w, b if extra else None, strides=transpose, padding="SAME", implementation=impl,
      **extra, **algo,
    )  # fmt: skip
  return lambda x, w, b: jaxdnn.conv(x, w, b if extra else None, implementation=impl, **kw, **extra)


def _torch_fn(torch, x_shape, w_shape, kw, mode):
  """PyTorch's conv on channels-last tensors, weights as PyTorch holds them."""
  F = torch.nn.functional
  n = len(x_shape) - 2
  conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]
  convt = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[n]
  groups = kw.get("feature_group_count", 1)
  dil = kw.get("kernel_dilation", 1)
  stride = kw.get("strides", 1)
  pad = kw.get("padding", "SAME")
  if isinstance(pad, tuple):
    pad = tuple(lo for lo, _ in pad)
  elif pad == "SAME":
    pad = "same" if stride == 1 else tuple((k - 1) // 2 for k in w_shape[:n])
  relu = mode == "fwd_bias_relu"
  s = kw.get("transpose")

  def run(x, w, b):
    bias = b if relu else None
    if s:
      k = w_shape[0]
      y = convt(x, w, bias, stride=s, padding=(k - s + 1) // 2, output_padding=(k - s) % 2)
    else:
      y = conv(x, w, bias, stride=stride, padding=pad, dilation=dil, groups=groups)
    return F.relu(y) if relu else y

  return run


def _torch_tensors(torch, x, w, b, n):
  fmt = {1: None, 2: torch.channels_last, 3: torch.channels_last_3d}[n]
  to = lambda a: torch.from_numpy(np.array(a.astype(jnp.float32))).cuda().to(torch.bfloat16)
  # [N, *sp, C] -> [N, C, *sp] in channels-last memory; [*win, Cin/g, Cout] -> [Cout, Cin/g, *win].
  xt = to(x).movedim(-1, 1)
  wt = to(w).movedim(-1, 0).movedim(-1, 1)
  if fmt is not None:
    xt, wt = xt.contiguous(memory_format=fmt), wt.contiguous(memory_format=fmt)
  else:
    xt, wt = xt.contiguous(), wt.contiguous()
  return xt, wt, to(b)


def _record(name, mode, impl, t, busy, flops):
  r = dict(
    op="conv", case=name, direction=mode, impl=impl, time_us=t * 1e6, tflops=flops / t / 1e12
  )
  if busy:
    r.update(gpu_us=busy * 1e6, gpu_tflops=flops / busy / 1e12)
  return r


def run(
  cases=None, modes=None, impls=("jaxdnn", "xla", "torch"), dtype=jnp.bfloat16, progress=None
):
  """The records; `progress(records)` after each case (to print and save as
  the run goes: a device call may be cut off)."""
  on_gpu = jax.default_backend() == "gpu"
  cuda_conv = on_gpu and _extension.has_cuda_target("jaxdnn_conv_fwd")
  records = []
  for name, xs, ws, kw, case_modes in CASES:
    if cases and not any(c in name for c in cases):
      continue
    k = jax.random.split(jax.random.key(len(records)), 3)
    x = jax.random.normal(k[0], xs, jnp.float32).astype(dtype)
    w = (jax.random.normal(k[1], ws, jnp.float32) / np.sqrt(np.prod(ws[:-1]))).astype(dtype)
    b = jax.random.normal(k[2], ws[-1:], jnp.float32).astype(dtype)
    fwd_flops = _flops(xs, ws, kw)
    for mode in case_modes:
      if modes and mode not in modes:
        continue
      flops = fwd_flops * (3 if mode == "fwd+bwd" else 1)
      for impl in impls:
        if impl == "torch":
          if on_gpu:
            records += _torch_rows(name, mode, xs, ws, kw, x, w, b, flops)
          continue
        if impl == "direct" and "depthwise" not in name and "grouped" not in name:
          continue
        if impl == "fft" and (kw.get("strides", 1) != 1 or kw.get("transpose")):
          continue
        if impl in ("jaxdnn", "sm90", "direct") and on_gpu and not cuda_conv:
          records.append(
            dict(op="conv", case=name, direction=mode, impl=impl, error="no CUDA kernel yet")
          )
          continue
        records.append(_jax_row(name, mode, impl, kw, x, w, b, flops))
    del x, w, b
    if progress:
      progress(records)
  return records


def _cotangent(f, x, w, b):
  """A fresh random cotangent of f's output (a constant one would let XLA
  simplify the gradient convolutions into reductions)."""
  out = jax.eval_shape(f, x, w, b)
  return jax.random.normal(jax.random.key(7), out.shape, jnp.float32).astype(out.dtype)


def _jax_row(name, mode, impl, kw, x, w, b, flops):
  try:
    if impl == "xla":
      f = _xla_fn(kw, mode)
    else:  # "sm90" / "direct" / "winograd" / "fft": jaxdnn with that algorithm forced
      algorithm = {
        "sm90": "implicit_gemm",
        "direct": "direct",
        "fft": "fft",
        "winograd": "winograd",
      }.get(impl)
      f = _jax_fn(None, kw, mode, algorithm=algorithm)
    if mode == "fwd+bwd":
      cot = _cotangent(f, x, w, b)

      def step(x, w, b, cot):
        y, vjp = jax.vjp(lambda x, w: f(x, w, b), x, w)
        return y, vjp(cot)

      args = (x, w, b, cot)
    else:
      step, args = f, (x, w, b)
    t = timing.time_jax(jax.jit(step), *args, repeats=10)
    busy = timing.busy_jax(jax.jit(step), *args)
    if timing.MODE.get("kernels"):
      lines = timing.kernel_lines(timing.jax_runner(jax.jit(step), *args)) or []
      print(f"kernels of {name} {mode} {impl}:", *lines[:25], sep="\n", flush=True)
  except Exception as e:  # noqa: BLE001 - reported in the table
    return dict(
      op="conv", case=name, direction=mode, impl=impl, error=f"{type(e).__name__}: {e}"[:200]
    )
  return _record(name, mode, impl, t, busy, flops)


def _torch_rows(name, mode, xs, ws, kw, x, w, b, flops):
  try:
    import torch

    if not torch.cuda.is_available():
      return []
    torch.backends.cudnn.benchmark = True
    n = len(xs) - 2
    xt, wt, bt = _torch_tensors(torch, x, w, b, n)
    if kw.get("transpose"):  # PyTorch's transposed weights: [C_in, C_out, *win]
      wt = wt.transpose(0, 1).flip(tuple(range(2, 2 + n))).contiguous()
    fn = _torch_fn(torch, xs, ws, kw, mode)
    if mode == "fwd+bwd":
      xg, wg = xt.clone().requires_grad_(True), wt.clone().requires_grad_(True)
      with torch.no_grad():
        cot = torch.randn_like(fn(xt, wt, bt))

      def call():
        fn(xg, wg, bt).backward(cot)
        xg.grad = wg.grad = None

      t, busy = timing.time_torch(call), timing.busy_torch(call)
    else:
      with torch.no_grad():
        t, busy = (
          timing.time_torch(lambda: fn(xt, wt, bt)),
          timing.busy_torch(lambda: fn(xt, wt, bt)),
        )
  except Exception as e:  # noqa: BLE001
    return [
      dict(
        op="conv", case=name, direction=mode, impl="torch", error=f"{type(e).__name__}: {e}"[:200]
      )
    ]
  return [_record(name, mode, "torch", t, busy, flops)]


def print_table(records, header=True):
  hdr = f"{'case':<40}{'dir':<15}{'impl':<8}{'us':>10}{'TFLOP/s':>9}  speedup"
  if header:
    print(hdr)
    print("-" * len(hdr))
  for r in records:
    if "error" in r:
      print(f"{r['case']:<40}{r['direction']:<15}{r['impl']:<8} {r['error'][:70]}")
      continue
    sp = " ".join(f"{k}:{v:.2f}x" for k, v in r.get("speedup_vs", {}).items())
    busy = (
      f"  | GPU-busy {r['gpu_us']:.1f} us {r['gpu_tflops']:.0f} TF/s" if r.get("gpu_us") else ""
    )
    print(
      f"{r['case']:<40}{r['direction']:<15}{r['impl']:<8}{r['time_us']:>10.1f}{r['tflops']:>9.1f}  "
      f"{sp}{busy}"
    )


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  ap = argparse.ArgumentParser(prog="python -m jaxdnn.bench conv")
  ap.add_argument("--out", help="write the records as JSON here")
  ap.add_argument(
    "--cases", help="comma-separated substrings of case names, _ for a space (default: all)"
  )
  ap.add_argument("--modes", help="comma-separated: fwd,fwd_bias_relu,fwd+bwd (default: all)")
  ap.add_argument(
    "--impls",
    default="jaxdnn,xla,torch",
    help="jaxdnn (its default choices), sm90 (the sm90 kernels forced), direct (the direct"
    " depthwise or grouped kernels forced), winograd (3x3 stride-1 cases), fft (the FFT"
    " convolution forced, stride-1 cases),"
    " xla, torch",
  )
  ap.add_argument("--gpu-busy", action="store_true", help="also GPU-busy time (CUPTI, PyTorch)")
  ap.add_argument("--quick", action="store_true", help="one small case (a CPU smoke run)")
  ap.add_argument(
    "--kernels", action="store_true", help="print each jax row's GPU time per kernel (PyTorch)"
  )
  args = ap.parse_args(argv)
  timing.MODE["gpu_busy"] = args.gpu_busy
  timing.MODE["kernels"] = args.kernels
  kw = dict(impls=tuple(args.impls.split(",")))
  if args.cases:
    kw["cases"] = [c.replace("_", " ") for c in args.cases.split(",")]
  if args.modes:
    kw["modes"] = args.modes.split(",")
  if args.quick:
    global CASES
    CASES = [("quick 3x3 16x16 32->32", (4, 16, 16, 32), (3, 3, 32, 32), {}, ("fwd", "fwd+bwd"))]
  device = jax.devices()[0]
  print(f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}")
  printed = [0]

  def progress(records):
    add_ratios(records)
    print_table(records[printed[0] :], header=printed[0] == 0)
    printed[0] = len(records)
    if args.out:
      with open(args.out, "w") as f:
        json.dump(
          dict(device=device.device_kind, jax=jax.__version__, records=records), f, indent=1
        )

  progress(run(**kw, progress=progress))
  return 0
