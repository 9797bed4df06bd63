"""Public convolution: conv and conv_transpose with Flax's arguments
(channels-last x [batch, *spatial, C_in], weights [*window, C_in/groups,
C_out]) and a fused epilogue, activation(alpha * conv + bias + beta *
residual), as custom_vjp functions whose forward, data gradient and weight
gradient are jaxdnn primitives (the activation's derivative and the bias
gradient fused into the gradients)."""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension, _platform
from jaxdnn._primitive import match_vma, vma_token
from jaxdnn.activations import kinds
from jaxdnn.config import config
from jaxdnn.conv import autotune, fft, reference
from jaxdnn.conv import geometry as geom
from jaxdnn.conv.primitives import (
  SAVE_NOTHING,
  SAVE_OUTPUT,
  SAVE_PREACT,
  conv_dgrad,
  conv_forward,
  conv_wgrad,
  dgrad_plan,
  forward_plan,
  prefer_sm90,
  wgrad_plan,
)

FLOATS = tuple(np.dtype(d) for d in (jnp.float32, jnp.bfloat16, jnp.float16, np.float64))
# Algorithms as cuDNN names them; those without a kernel yet are refused by
# name. Codes as the kernels take them (cpp/conv/problem.h).
ALGORITHMS = ("implicit_gemm", "direct", "winograd", "fft")
BUILT_ALGORITHMS = ("implicit_gemm", "direct", "winograd", "fft")
ALGORITHM_CODES = {"implicit_gemm": 1, "direct": 2, "winograd": 3}
# Activations whose derivative is a test on the output (relu's y > 0).
_FROM_OUTPUT = (1, 2)


def _check_array(op, name, a):
  if not hasattr(a, "shape") or not hasattr(a, "dtype"):
    raise TypeError(f"{op}: {name} must be an array, got {type(a).__name__}")
  if np.dtype(a.dtype) not in FLOATS:
    raise TypeError(
      f"{op}: {name} must be float32, bfloat16, float16 or float64, got dtype {a.dtype}"
    )
  return a if isinstance(a, jax.ShapeDtypeStruct) else jnp.asarray(a)


def _scalar(op, name, value):
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise TypeError(f"{op}: {name} must be a Python float, got {value!r}")
  with np.errstate(over="ignore"):
    f32 = float(np.float32(value))
  if not math.isfinite(f32) or (value != 0 and f32 == 0):
    raise ValueError(f"{op}: {name} must be a finite float32 number, got {value!r}")
  return f32


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _conv(static, x, w, bias, residual):
  return _conv_fwd(static, x, w, bias, residual)[0]


def _operands(*arrays):
  return tuple(a for a in arrays if a is not None)


def _conv_fwd(static, x, w, bias, residual):
  outs = conv_forward.bind(x, w, *_operands(bias, residual), **static)
  saved = {SAVE_NOTHING: None, SAVE_OUTPUT: outs[0], SAVE_PREACT: outs[-1]}[static["saved"]]
  return outs[0], (x, w, saved, vma_token(bias))


def _conv_bwd(static, res, dy):
  x, w, saved, bias_token = res
  s = _operands(saved)
  gt = _direct_dgrad_geometry(static["g"], static["algorithm"])
  grouped = _grouped_direct(static)
  if grouped and gt is not None and not _grouped_dgrad_serves(static, gt):
    gt = None
  # The direct kernels take dz (one XLA elementwise op, shared by both).
  dz = None
  if gt is not None or grouped:
    dz = reference.backprop(static["act"], static["act_param"], dy, saved)
  if gt is not None:
    dx, dres = _transposed_dgrad(static, gt, dz, w)
  else:
    dgrad = conv_dgrad.bind(dy, w, *s, **static)
    dx, dres = dgrad[0], dgrad[1] if static["has_residual"] else None
  if grouped:
    wgrad = conv_wgrad.bind(x, dz.astype(x.dtype), **_dz_static(static, x.dtype))
  else:
    wgrad = conv_wgrad.bind(x, dy, *s, **static)
  dbias = match_vma(wgrad[1], bias_token) if static["has_bias"] else None
  return dx, match_vma(wgrad[0], vma_token(w)), dbias, dres


def _grouped_direct(static) -> bool:
  """Whether the call runs on the grouped (not depthwise) direct kernels."""
  g = static["g"]
  depthwise = g.groups == g.in_channels == g.out_channels
  return static["algorithm"] == ALGORITHM_CODES["direct"] and g.groups > 1 and not depthwise


def _dz_static(static, dtype):
  """The primitives' parameters for an operand that is dz already (the
  activation's derivative applied, rounded to x's dtype)."""
  return dict(static, act=0, act_param=0.0, saved=SAVE_NOTHING, out_dtype=str(np.dtype(dtype)))


def _transposed_static(static, gt):
  """The forward parameters of the transposed problem gt (dz convolved with
  the flipped window): no epilogue, w's dtype in, x's out."""
  return dict(
    static,
    g=gt,
    act=0,
    act_param=0.0,
    beta=0.0,
    has_bias=False,
    has_residual=False,
    saved=SAVE_NOTHING,
    out_dtype=static["x_dtype"],
    x_dtype=static["w_dtype"],
    bias_dtype="",
    residual_dtype="",
  )


def _grouped_dgrad_serves(static, gt) -> bool:
  """Whether the grouped forward kernel serves the transposed problem (its
  groups read C_out / groups channels and write C_in / groups)."""
  t = _transposed_static(static, gt)
  return _extension.has_cuda_target("jaxdnn_conv_fwd") and (
    forward_plan(
      gt, 1, t["x_dtype"], t["out_dtype"], "", "", 0, SAVE_NOTHING, False, False,
      ALGORITHM_CODES["direct"], query="conv_fwd_kernel",
    ) == 3
  )  # fmt: skip


def _transposed_dgrad(static, gt, dz, w):
  """dx and the residual's gradient of a depthwise or grouped convolution
  through the forward primitive on the transposed problem gt: alpha * dz
  convolved with the window flipped and each group's [C_in/groups,
  C_out/groups] block transposed (a no-op for depthwise), dz rounded to w's
  dtype first as the data-gradient kernels round it."""
  g = static["g"]
  cin_g, cout_g = g.in_channels // g.groups, g.out_channels // g.groups
  blocks = w.reshape((*g.window, cin_g, g.groups, cout_g))
  flipped = jnp.flip(blocks, axis=tuple(range(g.ndim)))
  swapped = (
    *range(g.ndim),
    g.ndim + 2,
    g.ndim + 1,
    g.ndim,
  )  # [*window, C_out/groups, groups, C_in/groups]
  transposed_w = jnp.transpose(flipped, swapped).reshape(-1)
  dx = conv_forward.bind(dz.astype(w.dtype), transposed_w, **_transposed_static(static, gt))[0]
  dres = None
  if static["has_residual"]:
    dres = (dz * static["beta"]).astype(static["residual_dtype"])
  return dx, dres


def _direct_dgrad_geometry(g, algorithm):
  """With algorithm="direct" forced on a depthwise convolution, the geometry
  of the forward problem whose output is its data gradient: dz (y's
  positions) convolved with each channel's window flipped, the strides as
  input dilation, stride 1, padding (window - 1) * dilation - low on the low
  side. The direct kernels then serve the gradient too (on CUDA the tiled
  depthwise kernel at stride 1, the direct loop otherwise) instead of XLA's
  data-gradient convolution (jax#26266: tens of milliseconds with
  dilation). None where that problem would need negative padding or the
  forward dilates its input: those keep the data-gradient primitive."""
  if algorithm != ALGORITHM_CODES["direct"] or g.groups == 1:
    return None
  if any(d != 1 for d in g.input_dilation):
    return None
  pads = []
  for n, o, k, st, d, (lo, _) in zip(
    g.spatial, g.out, g.window, g.strides, g.kernel_dilation, g.pads
  ):
    low, high = (k - 1) * d - lo, n + lo - 1 - (o - 1) * st
    if low < 0 or high < 0:
      return None
    pads.append((low, high))
  return dataclasses.replace(
    g,
    in_channels=g.out_channels,
    out_channels=g.in_channels,
    spatial=g.out,
    out=g.spatial,
    strides=(1,) * g.ndim,
    input_dilation=g.strides,
    pads=tuple(pads),
  )


_conv.defvjp(_conv_fwd, _conv_bwd)


def _activation(op, activation, approximate, negative_slope, elu_alpha):
  if activation is None:
    return 0, 0.0
  return kinds.resolve(
    op, activation, approximate=approximate, negative_slope=negative_slope, alpha=elu_alpha
  )


class _Call(NamedTuple):
  """One convolution call, decided: its checked arguments and which kernel
  serves it (or XLA), with the reason."""

  op: str
  x: Any
  w: Any
  bias: Any
  residual: Any
  g: geom.Geometry
  pad_mode: Any
  act: int
  act_param: float
  alpha: float
  beta: float
  out_dtype: Any
  saved: int
  implementation: str | None  # as the lowering takes it: None, "cpu", "cuda" or "xla"
  native: bool  # XLA's convolution as user code gets it (a fallback), not the oracle
  platform: str  # "cpu", "cuda" or "xla"
  algorithm: str
  reason: str
  forced: bool = False  # the algorithm was asked for (gradients follow it where served)
  heuristic: bool = False  # XLA's convolution chosen as the faster, not as a fallback


def _decide(
  op,
  x,
  w,
  bias,
  residual,
  g,
  pad_mode,
  activation,
  approximate,
  negative_slope,
  elu_alpha,
  alpha,
  beta,
  preferred_element_type,
  algorithm,
  implementation,
) -> _Call:
  act, act_param = _activation(op, activation, approximate, negative_slope, elu_alpha)
  alpha = _scalar(op, "alpha", alpha)
  beta = _scalar(op, "beta", beta)
  if preferred_element_type is None:
    out_dtype = np.dtype(x.dtype)
  elif np.dtype(preferred_element_type) in (np.dtype(jnp.float32), np.dtype(x.dtype)):
    out_dtype = np.dtype(preferred_element_type)
  else:
    raise ValueError(
      f"{op}: preferred_element_type must be None (x's dtype) or float32, got "
      f"{preferred_element_type!r}"
    )
  out_shape = (g.batch, *g.out, g.out_channels)
  if bias is not None:
    bias = _check_array(op, "bias", bias)
    if tuple(bias.shape) != (g.out_channels,):
      raise ValueError(
        f"{op}: bias must have shape ({g.out_channels},) (w's output channels), got {bias.shape}"
      )
  if residual is not None:
    residual = _check_array(op, "residual", residual)
    if tuple(residual.shape) != out_shape:
      raise ValueError(
        f"{op}: residual must have the output's shape {out_shape}, got {residual.shape}"
      )
  if algorithm is not None and algorithm not in ALGORITHMS:
    raise ValueError(f"{op}: algorithm must be None or one of {ALGORITHMS}, got {algorithm!r}")
  _platform.check_implementation(implementation, op)
  wide = x.dtype == jnp.float64 or w.dtype == jnp.float64
  saved = SAVE_NOTHING if act == 0 else (SAVE_OUTPUT if act in _FROM_OUTPUT else SAVE_PREACT)
  bias_dtype = str(np.dtype(bias.dtype)) if bias is not None else ""
  residual_dtype = str(np.dtype(residual.dtype)) if residual is not None else ""
  depthwise = g.in_channels == g.groups and g.out_channels == g.groups

  # The platform a kernel would run on, and whether the algorithm asked for
  # has a kernel there: a forced algorithm that cannot serve is an error.
  backend = jax.default_backend()
  target = implementation or ("cuda" if backend == "gpu" else "cpu" if backend == "cpu" else None)
  if algorithm is not None and implementation == "xla":
    raise ValueError(
      f"{op}: algorithm={algorithm!r} selects a jaxdnn kernel; implementation='xla' runs none"
    )
  if algorithm is not None:
    if algorithm not in BUILT_ALGORITHMS:
      raise ValueError(
        f"{op}: algorithm={algorithm!r} has no jaxdnn kernel yet (built: {BUILT_ALGORITHMS})"
      )
    if algorithm == "winograd" and target in ("cpu", "cuda") and not _winograd_serves(g):
      raise ValueError(
        f"{op}: algorithm='winograd' serves 3x3 windows over the last two spatial dims (a depth "
        "window of 1 in 3D), stride 1, no input or kernel dilation; use 'implicit_gemm' or None"
      )
    if target in ("cpu", "cuda") and algorithm == "direct" and g.groups == 1:
      raise ValueError(
        f"{op}: algorithm='direct' serves depthwise and grouped convolutions "
        "(feature_group_count > 1); use 'implicit_gemm' or None"
      )
    if algorithm == "fft" and not fft.serves(g):
      raise ValueError(
        f"{op}: algorithm='fft' serves stride-1 convolutions without input dilation (any "
        "window, padding, kernel dilation and groups); use 'implicit_gemm' or None"
      )

  def cuda_forward_plan(algorithm):
    return forward_plan(
      g, g.batch, x.dtype, out_dtype, bias_dtype, residual_dtype, act, saved,
      bias is not None, residual is not None, ALGORITHM_CODES.get(algorithm, 0),
    )  # fmt: skip

  fft_by_rule = (
    algorithm is None
    and implementation != "xla"
    and not wide
    and target in ("cpu", "cuda")
    and (target == "cpu" or _extension.has_cuda_target("jaxdnn_conv_fft_mix"))
    and fft.default_serves(g, target)
  )
  if fft_by_rule:
    algorithm = "fft"
  # Grouped layers stay on XLA's convolution by default: the grouped kernels
  # measured 0.65-0.99x it forward+backward on an H200 (docs/perf/conv.md);
  # algorithm="direct" runs them.
  chosen_by_rule = algorithm is None and _dilated_depthwise_goes_direct(
    g, target, implementation, wide, lambda: cuda_forward_plan("direct") >= 0
  )
  if chosen_by_rule:
    algorithm = "direct"

  def cuda_unsupported():
    if algorithm == "fft":
      return None
    if not _extension.has_cuda_target("jaxdnn_conv_fwd"):
      return "this build has no CUDA convolution kernel (CUTLASS headers missing)"
    if cuda_forward_plan(algorithm) < 0:
      if algorithm == "winograd":
        return (
          "the CUDA Winograd kernel does not serve this call (it takes float32, bfloat16 or "
          "float16 x and w, an output of x's dtype or float32, a residual of the output's dtype, "
          "at most 1820 groups)"
        )
      if algorithm == "direct" and not depthwise:
        return (
          "the CUDA grouped kernel does not serve this call (it takes bfloat16/float16 x and w, "
          "8, 16 or 32 input and 8-32 output channels a group, at most 512 taps)"
        )
      return (
        "the CUDA convolution kernel does not serve this call yet (it takes bfloat16/float16 "
        "x and w with x's output dtype, no groups, no input dilation, channels multiples of "
        "8, padding <= 16, and no activation, relu or relu6)"
      )
    return None

  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    impl = _platform.resolve(
      implementation, op, cuda_unsupported, no_kernel="a float64 x or w" if wide else None
    )
  fallback_reason = str(caught[0].message) if caught else ""
  if impl == "xla" and implementation is None and algorithm is not None:
    raise ValueError(f"{op}: algorithm={algorithm!r} cannot serve this call: {fallback_reason}")
  platform = "xla" if impl == "xla" else (impl or target)
  heuristic = (
    platform == "cuda"
    and algorithm is None
    and not prefer_sm90(g, g.batch)
    and not _pointwise_gemm_serves(
      g,
      x.dtype,
      out_dtype,
      bias_dtype,
      residual_dtype,
      act,
      saved,
      bias is not None,
      residual is not None,
    )  # fmt: skip
  )
  if platform != "xla" and algorithm == "fft":
    chosen = "fft"
    reason = (
      f"a window of {math.prod(g.window)} taps (>= {fft.DEFAULT_MIN_TAPS[target]} on {target}) at "
      "stride 1: the FFT "
      "convolution, whose cost does not grow with the window (algorithm='implicit_gemm' forces "
      "the direct sum)"
      if fft_by_rule
      else "algorithm='fft' asked for: XLA's real FFTs and jaxdnn's per-frequency channel mixing"
    )
  elif heuristic:
    impl, platform = "xla", "xla"
    chosen = "xla"
    reason = (
      "XLA's convolution (cuDNN) measured faster than the sm90 implicit GEMM on this kind of "
      "problem (cpp/conv/heuristics.h); algorithm='implicit_gemm' forces the kernel"
    )
  elif platform == "xla":
    chosen = "xla"
    reason = fallback_reason or "implementation='xla' (the plain-JAX oracle)"
  elif platform == "cuda" and chosen_by_rule:
    chosen, reason = (
      "direct",
      "depthwise with a dilated window: the tiled direct kernels measured 17x XLA's "
      "convolution (cuDNN) forward and 179x forward+backward (docs/perf/conv.md); "
      "algorithm='implicit_gemm' cannot serve groups, implementation='xla' runs XLA's",
    )
  elif platform == "cuda" and algorithm == "direct":
    chosen, reason = (
      "direct",
      "algorithm='direct' asked for: the CUDA "
      + ("depthwise channel-vector loop" if depthwise else "grouped tensor-core kernel"),
    )
  elif platform == "cuda" and algorithm == "winograd":
    chosen, reason = (
      "winograd",
      "algorithm='winograd' asked for: the CUDA Winograd forward (transforms, batched "
      + ("float32 FMA" if jnp.dtype(x.dtype) == jnp.float32 else "tensor-core")
      + " GEMMs, the output transform with the epilogue)",
    )
  elif platform == "cuda":
    chosen = "implicit_gemm"
    reason = "the sm90 implicit GEMM serves this call (CUTLASS, TMA im2col, fused epilogue)"
  elif algorithm is not None:
    chosen, reason = algorithm, f"algorithm={algorithm!r} asked for"
  elif depthwise:
    chosen, reason = "direct", "depthwise: the channel-vector direct loop"
  else:
    chosen, reason = "implicit_gemm", "the blocked GEMM over each output row's patches"
  return _Call(
    op,
    x,
    w,
    bias,
    residual,
    g,
    pad_mode,
    act,
    act_param,
    alpha,
    beta,
    out_dtype,
    saved,
    impl,
    impl == "xla" and implementation is None,
    platform,
    chosen,
    reason,
    forced=algorithm is not None,
    heuristic=heuristic,
  )


def _autotuned(c: _Call, decide, kwargs, *, measure: bool) -> _Call:
  """c, or under jaxdnn.config.benchmark (jaxdnn.autotune()) the fastest
  candidate's call (conv/autotune.py), timed now where `measure` and not
  yet known. A remembered winner that cannot serve here (another build)
  leaves c."""
  if not config.benchmark:
    return c
  if jnp.dtype(c.x.dtype) == jnp.float64 or jnp.dtype(c.w.dtype) == jnp.float64:
    return c
  name, reason = autotune.choose(
    lambda name, forced: _candidate(kwargs, name, forced), c.x, c.w, c.bias, c.residual, c.g,
    kwargs, measure=measure,
  )  # fmt: skip
  if name is None:
    return c
  forced = dict(autotune.CANDIDATES)[name]
  try:
    tuned = decide(forced.get("algorithm"), forced.get("implementation"))
  except ValueError:
    return c
  return (_as_native_xla(tuned) if name == "xla" else tuned)._replace(reason=reason)


def _winograd_output_tile(g) -> int:
  """The CPU Winograd's output tile side: F(4x4, 3x3) where the output has 4
  rows and 4 columns or more, F(2x2, 3x3) below (cpp/conv/cpu/winograd.h's
  WinogradOutputTile)."""
  spatial = tuple(g.out)
  return 4 if len(spatial) >= 2 and min(spatial[-2:]) >= 4 else 2


def _winograd_serves(g) -> bool:
  """The problems the CPU's Winograd forward takes (cpp/conv/cpu/winograd.h's
  WinogradServes)."""
  return (
    g.ndim >= 2
    and g.window[-2:] == (3, 3)
    and all(k == 1 for k in g.window[:-2])
    and all(s == 1 for s in g.strides)
    and all(d == 1 for d in g.input_dilation)
    and all(d == 1 for d in g.kernel_dilation)
  )


def _dilated_depthwise_goes_direct(g, target, implementation, wide, direct_serves) -> bool:
  """Whether a CUDA depthwise convolution with a dilated window runs on the
  direct kernels by default, gradients included: XLA's (cuDNN's) dilated
  depthwise kernels are 17x slower forward and two orders of magnitude
  slower backward (jax#26266), where undilated ones beat ours (0.66x).
  direct_serves(): whether the direct kernels' plan serves the call."""
  depthwise = g.in_channels == g.groups == g.out_channels
  return (
    target == "cuda"
    and implementation != "xla"
    and depthwise
    and not wide
    and any(d != 1 and k > 1 for d, k in zip(g.kernel_dilation, g.window))
    and all(d == 1 for d in g.input_dilation)
    and _extension.has_cuda_target("jaxdnn_conv_fwd")
    and direct_serves()
  )


def _pointwise_gemm_serves(
  g, x_dtype, out_dtype, bias_dtype, residual_dtype, act, saved, has_bias, has_residual
) -> bool:
  """Whether the 1x1 persistent GEMM runs this forward by default (1x1,
  stride 1, unpadded, channels multiples of 8, a 16-bit x, an identity/ReLU/
  ReLU6 epilogue): it measured 1.2-2.1x the implicit GEMM on every ResNet-50
  1x1 layer, which makes it the default over XLA's convolution there."""
  return (
    forward_plan(
      g, g.batch, x_dtype, out_dtype, bias_dtype, residual_dtype, act, saved, has_bias,
      has_residual, 0, query="conv_fwd_kernel",
    ) == 1
  )  # fmt: skip


def _execute(c: _Call):
  if c.implementation == "xla" and c.native and not c.heuristic:
    warnings.warn(c.reason, stacklevel=3)
  x, w = jnp.asarray(c.x), jnp.asarray(c.w)
  bias = None if c.bias is None else jnp.asarray(c.bias)
  residual = None if c.residual is None else jnp.asarray(c.residual)
  if c.pad_mode is not None:
    mode, wrap = c.pad_mode
    x = jnp.pad(x, ((0, 0), *wrap, (0, 0)), mode=mode)
  g = c.g
  args = (x, w, bias, residual, g, c.act, c.act_param, c.alpha, c.beta, c.out_dtype)
  if c.algorithm == "fft" and c.implementation != "xla":
    plan = fft.make_plan(
      g,
      c.act,
      c.act_param,
      c.saved,
      c.alpha,
      c.beta,
      c.out_dtype,
      bias,
      residual,
      c.implementation,
    )
    return fft.conv(plan, x, w, bias, residual)
  if c.implementation == "xla":
    # Asked for: the float32-accumulating oracle; chosen because no kernel
    # serves the call: XLA's convolution as user code runs it.
    return reference.forward(*args, native=c.native)
  static = dict(
    g=dataclasses.replace(g, batch=0),
    act=c.act,
    act_param=c.act_param,
    alpha=c.alpha,
    beta=c.beta,
    has_bias=bias is not None,
    has_residual=residual is not None,
    saved=c.saved,
    # The code asked for (0 where the algorithm was chosen): the CUDA forward
    # runs a 1x1 stride-1 layer as a GEMM only when asked (heuristics.h).
    algorithm=ALGORITHM_CODES[c.algorithm] if c.forced else 0,
    forced=_gradients_forced(c),
    out_dtype=str(np.dtype(c.out_dtype)),
    x_dtype=str(np.dtype(x.dtype)),
    w_dtype=str(np.dtype(w.dtype)),
    bias_dtype=str(np.dtype(bias.dtype)) if bias is not None else "",
    residual_dtype=str(np.dtype(residual.dtype)) if residual is not None else "",
    implementation=c.implementation,
  )
  n = g.batch
  # Explicit row widths: a batch of 0 leaves -1 undetermined.
  y = _conv(
    static,
    x.reshape(n, math.prod(x.shape[1:])),
    w.reshape(-1),
    bias,
    None if residual is None else residual.reshape(n, math.prod(residual.shape[1:])),
  )
  return y.reshape((n, *g.out, g.out_channels))


def _plan_report(c: _Call) -> dict:
  report = dict(
    implementation=c.platform, algorithm=c.algorithm, reason=c.reason, config={}, gradients=""
  )
  if c.algorithm == "fft" and c.platform != "xla":
    report["config"] = dict(
      kernel="FFT: XLA's real FFTs (cuFFT on a GPU, DUCC on the CPU) in float32 and jaxdnn's "
      "per-frequency channel mixing",
      fft_sizes=fft.fft_sizes(c.g),
      workspace_bytes=0,
    )
    report["gradients"] = (
      "FFT: dz's spectrum times the weights' (data gradient) and the input's times dz's "
      "conjugate (weight gradient), on the same mixing kernel"
    )
  elif c.platform == "cuda":
    static = dict(
      x_dtype=str(np.dtype(c.x.dtype)),
      out_dtype=str(np.dtype(c.out_dtype)),
      bias_dtype=str(np.dtype(c.bias.dtype)) if c.bias is not None else "",
      residual_dtype=str(np.dtype(c.residual.dtype)) if c.residual is not None else "",
      act=c.act,
      saved=c.saved,
      has_bias=c.bias is not None,
      has_residual=c.residual is not None,
      algorithm=ALGORITHM_CODES[c.algorithm] if c.forced else 0,
    )
    kernel = forward_plan(c.g, c.g.batch, query="conv_fwd_kernel", **static)
    if kernel in (4, 5):
      m = 2 if kernel == 4 else 4
      report["config"] = dict(
        kernel=f"Winograd F({m}x{m}, 3x3) (CUDA): the weights' and the input's transforms, "
        f"{(m + 2) ** 2} GEMMs a group ("
        + (
          "float32 FMAs"
          if jnp.dtype(c.x.dtype) == jnp.float32
          else "mma.sync tensor cores, float32 sums"
        )
        + "), the output transform with the epilogue",
        workspace_bytes=forward_plan(c.g, c.g.batch, **static),
      )
    elif kernel == 3:
      report["config"] = dict(
        kernel="grouped direct (CUDA): mma.sync tensor cores, a CTA a group, each warp's 16 "
        "output positions' window rows staged in shared memory",
        workspace_bytes=0,
      )
    elif kernel == 2:
      report["config"] = dict(
        kernel="depthwise direct (CUDA): the tiled kernel (input patches in shared memory, any"
        " stride and kernel dilation), the channel-vector loop for input dilation",
        workspace_bytes=0,
      )
    else:
      report["config"] = dict(
        kernel="CUTLASS sm90 persistent GEMM (1x1 stride 1), cooperative warp-specialized"
        if kernel == 1
        else "CUTLASS sm90 implicit GEMM, warp-specialized, cluster 1x1",
        workspace_bytes=forward_plan(c.g, c.g.batch, **static),
        tile=f"128x{forward_plan(c.g, c.g.batch, query='conv_fwd_tile_n', **static)}x64",
      )
    report["gradients"] = _cuda_gradients(c)
  elif c.platform == "cpu":
    m = _winograd_output_tile(c.g)
    kernels = {
      "direct": "channel-vector loop"
      if c.g.groups == c.g.in_channels == c.g.out_channels
      else "grouped direct sum (per output, group, tap and input channel, a row of "
      "C_out/groups products)",
      "winograd": f"Winograd F({m}x{m}, 3x3): {(m + 2) ** 2} GEMMs over transformed "
      f"{m + 2}x{m + 2} input tiles (6x16 float32 register tiles)",
    }
    report["config"] = dict(kernel=kernels.get(c.algorithm, "6x16 float32 register tiles"))
    report["gradients"] = "the CPU kernels (data gradient on the transposed problem)"
  else:
    report["gradients"] = "jax.grad of the XLA composition"
  return report


def _gradients_forced(c: _Call) -> bool:
  """Whether the gradients run on the sm90 kernels wherever they serve (a
  forced algorithm's), rather than by the default rule. Winograd is a
  forward algorithm: its gradients take the default's path."""
  return c.forced and c.algorithm != "winograd"


def _cuda_gradients(c: _Call) -> str:
  """How the backward of a call the CUDA forward serves runs: each gradient
  on its sm90 kernel where its plan serves the problem, else on XLA."""
  dtypes = dict(
    x_dtype=str(np.dtype(c.x.dtype)),
    w_dtype=str(np.dtype(c.w.dtype)),
    dy_dtype=str(np.dtype(c.out_dtype)),
    bias_dtype=str(np.dtype(c.bias.dtype)) if c.bias is not None else "",
    residual_dtype=str(np.dtype(c.residual.dtype)) if c.residual is not None else "",
  )
  static = dict(
    act=c.act, saved=c.saved, has_bias=c.bias is not None, has_residual=c.residual is not None
  )

  def served(plan, target):
    return _extension.has_cuda_target(target) and plan(c.g, 1, **static, **dtypes) >= 0

  depthwise = c.g.groups == c.g.in_channels == c.g.out_channels
  if c.forced and c.algorithm == "direct" and not depthwise:
    gt = _direct_dgrad_geometry(c.g, ALGORITHM_CODES["direct"])
    dgrad_served = gt is not None and _grouped_dgrad_serves(dtypes, gt)
    wgrad_served = _extension.has_cuda_target("jaxdnn_conv_wgrad") and wgrad_plan(
      c.g, 1, x_dtype=dtypes["x_dtype"], dy_dtype=dtypes["x_dtype"], act=0, saved=SAVE_NOTHING,
      has_bias=c.bias is not None, bias_dtype=dtypes["bias_dtype"],
      algorithm=ALGORITHM_CODES["direct"],
    ) >= 0  # fmt: skip
    return (
      "data gradient: "
      + (
        "the grouped forward kernel on the transposed problem (flipped, per-group transposed "
        "window)"
        if dgrad_served
        else "XLA's convolution"
      )
      + "; weight gradient: "
      + (
        "the grouped weight-gradient kernel (slices' float32 partials summed in order)"
        if wgrad_served
        else "XLA's convolution"
      )
    )
  if c.forced and c.algorithm == "direct":
    transposed = _direct_dgrad_geometry(c.g, ALGORITHM_CODES["direct"])
    return (
      "data gradient: "
      + (
        "the depthwise forward kernel on the transposed problem (flipped window)"
        if transposed is not None
        else "XLA's convolution (the transposed problem needs negative padding)"
      )
      + "; weight gradient: "
      + (
        "the depthwise weight-gradient kernel (per-CTA partials summed in order)"
        if _extension.has_cuda_target("jaxdnn_conv_wgrad")
        and wgrad_plan(c.g, 1, algorithm=ALGORITHM_CODES["direct"], **static, **dtypes) >= 0
        else "XLA's convolution"
      )
    )

  if not _gradients_forced(c) and not prefer_sm90(c.g, c.g.batch, gradients=True):
    return (
      "data and weight gradients: XLA's convolution (measured faster than the sm90 kernels; "
      "algorithm='implicit_gemm' forces them)"
    )

  dgrad = (
    "data gradient: the sm90 implicit GEMM (CUTLASS dgrad)"
    if served(dgrad_plan, "jaxdnn_conv_dgrad")
    else "data gradient: XLA's convolution (the sm90 dgrad serves stride 1 only)"
  )
  wgrad = (
    "weight gradient: the sm90 implicit GEMM (CUTLASS wgrad, batch parts summed in order)"
    if served(wgrad_plan, "jaxdnn_conv_wgrad")
    else "weight gradient: XLA's convolution"
  )
  return f"{dgrad}; {wgrad}"


def _inputs(op, x, w):
  x = _check_array(op, "x", x)
  w = _check_array(op, "w", w)
  if x.dtype != w.dtype:
    raise TypeError(f"{op}: x and w must have the same dtype, got {x.dtype} and {w.dtype}")
  return x, w


def conv(
  x,
  w,
  bias=None,
  *,
  strides=1,
  padding="SAME",
  input_dilation=1,
  kernel_dilation=1,
  feature_group_count=1,
  activation=None,
  approximate=True,
  negative_slope=0.01,
  elu_alpha=1.0,
  residual=None,
  alpha=1.0,
  beta=1.0,
  preferred_element_type=None,
  algorithm=None,
  implementation=None,
):
  """activation(alpha * conv(x, w) + bias + beta * residual), fused.

  The convolution is lax.conv_general_dilated's (cross-correlation, as Flax's
  nn.Conv computes it), accumulated in float32; the epilogue runs in float32
  and rounds once.

  Args:
    x: [batch, *spatial, C_in] with 1-3 spatial dims; float32, bfloat16 or
      float16 (float64 runs on the XLA composition with one warning).
    w: [*window, C_in // feature_group_count, C_out], x's dtype (Flax's
      kernel layout).
    bias: None or [C_out], any float dtype.
    strides, input_dilation, kernel_dilation: an int or one int per spatial
      dim, each >= 1 (Flax's arguments; input_dilation is lax's lhs_dilation).
    padding: "SAME", "VALID", "CIRCULAR" / "REFLECT" (the input padded
      periodically / by reflection by half the dilated window, then VALID:
      Flax's), "CAUSAL" (1D: all the padding before), an int, or per spatial
      dim an int or a (low, high) pair (negative entries crop, as lax's).
    feature_group_count: groups of channels convolved separately (C_in for
      a depthwise convolution).
    activation: None or one of "relu", "relu6", "gelu", "silu", "sigmoid",
      "tanh", "elu", "leaky_relu", "softplus", "squared_relu", "identity"
      (jax.nn's definitions); approximate selects gelu's tanh form (True,
      jax.nn's default) or the erf form; negative_slope is leaky_relu's,
      elu_alpha elu's alpha.
    residual: None or an array of the output's shape, added (times beta)
      before the activation; its gradient is beta times the pre-activation's.
    alpha, beta: finite float32 scales of the convolution and the residual.
    preferred_element_type: None (x's dtype) or float32, the output's dtype.
    algorithm: None (chosen per problem: on a GPU the measured rules of
      cpp/conv/heuristics.h pick the sm90 kernels or XLA's convolution,
      forward and gradients apart) or one of "direct", "implicit_gemm",
      "winograd", "fft"; one with no kernel yet is refused by name. "direct"
      serves depthwise and grouped convolutions (feature_group_count > 1;
      on CUDA, grouped layers of 8, 16 or 32 input and 8-32 output channels
      a group in bfloat16/float16), gradients included. A forced
      "implicit_gemm" also runs the gradients on their sm90 kernels wherever
      those serve the problem. "winograd" (3x3 windows, stride 1, no
      dilation) runs the forward as F(4x4, 3x3), or F(2x2, 3x3) where the
      output has fewer than 4 rows or columns; on CUDA bfloat16/float16 always
      F(2x2, 3x3), whose transforms keep 16-bit rounding small. Its
      gradients run where algorithm=None would run them. "fft" (stride 1, no input dilation:
      XLA's float32 real FFTs around jaxdnn's per-frequency channel mixing,
      gradients the same way; jaxdnn/conv/fft.py) is the default for windows
      of 256 taps or more on CUDA, 64 on the CPU; a NaN or Inf in a sample reaches all of that
      sample's outputs through the FFTs. Under `jaxdnn.autotune()` (or
      jaxdnn.config.benchmark = True) a call that leaves both this and
      `implementation` as None times every candidate once per problem and
      runs the fastest (jaxdnn/conv/autotune.py).
    implementation: None (the kernel for the platform), "cuda", "cpu" or
      "xla" (plain JAX: lax.conv_general_dilated and jax.nn, the oracle).

  Returns:
    [batch, *out_spatial, C_out], the output spatial dims lax's for the
    padding and strides.
  """
  arguments = locals()
  kwargs = {k: arguments[k] for k in _CONV_KEYWORDS}
  return _execute(_conv_call(x, w, bias, residual, kwargs, algorithm, implementation, measure=True))


# conv's keyword arguments but residual, algorithm and implementation (what
# conv and conv_plan hand _conv_call, and autotune keys on).
_CONV_KEYWORDS = (
  "strides", "padding", "input_dilation", "kernel_dilation", "feature_group_count", "activation",
  "approximate", "negative_slope", "elu_alpha", "alpha", "beta", "preferred_element_type",
)  # fmt: skip


def _conv_call(x, w, bias, residual, kwargs, algorithm, implementation, *, measure, tune=True):
  """conv's decided call for these arguments (kwargs: conv's keyword
  arguments but residual, algorithm and implementation); under
  jaxdnn.autotune, where `tune`, the tuned one (timed now where `measure`)."""
  op = "conv"
  x, w = _inputs(op, x, w)
  k = kwargs
  g, pad_mode = geom.make(
    op, x.shape, w.shape, k["strides"], k["padding"], k["input_dilation"], k["kernel_dilation"],
    k["feature_group_count"],
  )  # fmt: skip

  def decide(algorithm, implementation):
    return _decide(
      op, x, w, bias, residual, g, pad_mode, k["activation"], k["approximate"],
      k["negative_slope"], k["elu_alpha"], k["alpha"], k["beta"], k["preferred_element_type"],
      algorithm, implementation,
    )  # fmt: skip

  c = decide(algorithm, implementation)
  if not tune or algorithm is not None or implementation is not None:
    return c
  return _autotuned(c, decide, kwargs, measure=measure)


def _as_native_xla(c: _Call) -> _Call:
  """c on XLA's own convolution, as the default runs it where XLA measured
  faster (not the float32-accumulating oracle): autotune's "xla"."""
  return c._replace(native=True, heuristic=True)


def _candidate(kwargs, name, forced):
  """conv with one autotune candidate forced, untuned: fn(x, w, bias, residual)."""

  def run(x, w, bias, residual):
    c = _conv_call(
      x, w, bias, residual, kwargs, forced.get("algorithm"), forced.get("implementation"),
      measure=False, tune=False,
    )  # fmt: skip
    return _execute(_as_native_xla(c) if name == "xla" else c)

  return run


def conv_plan(
  x,
  w,
  bias=None,
  *,
  strides=1,
  padding="SAME",
  input_dilation=1,
  kernel_dilation=1,
  feature_group_count=1,
  activation=None,
  approximate=True,
  negative_slope=0.01,
  elu_alpha=1.0,
  residual=None,
  alpha=1.0,
  beta=1.0,
  preferred_element_type=None,
  algorithm=None,
  implementation=None,
):
  """Which kernel `conv` with these arguments would run, and why, without
  running it: arrays or jax.ShapeDtypeStruct for x, w, bias and residual.

  Returns:
    dict(implementation="cpu" | "cuda" | "xla", algorithm=..., reason=...,
    config={the kernel and its tile / workspace}, gradients=how the backward
    runs). Raises what `conv` would raise for these arguments.
  """
  arguments = locals()
  kwargs = {k: arguments[k] for k in _CONV_KEYWORDS}
  # A plan runs nothing: under jaxdnn.autotune it reports a winner already
  # timed (this process or the cache file), else the rules' choice.
  c = _conv_call(x, w, bias, residual, kwargs, algorithm, implementation, measure=False)
  return _plan_report(c)


def conv_transpose(
  x,
  w,
  bias=None,
  *,
  strides=1,
  padding="SAME",
  kernel_dilation=1,
  transpose_kernel=False,
  activation=None,
  approximate=True,
  negative_slope=0.01,
  elu_alpha=1.0,
  residual=None,
  alpha=1.0,
  beta=1.0,
  preferred_element_type=None,
  algorithm=None,
  implementation=None,
):
  """Transposed convolution with Flax's nn.ConvTranspose semantics
  (lax.conv_transpose: the input dilated by the strides, then convolved), and
  conv's fused epilogue.

  Args:
    x: [batch, *spatial, C_in] with 1-3 spatial dims.
    w: [*window, C_in, C_out] (transpose_kernel=False, Flax's default) or
      [*window, C_out, C_in] with the window flipped (transpose_kernel=True:
      the gradient of the conv with that kernel).
    strides, kernel_dilation: an int or one int per spatial dim.
    padding: "SAME", "VALID" (lax.conv_transpose's), an int, or per spatial
      dim an int or a (low, high) pair of the input-dilated convolution.
    The other arguments as conv's.
  """
  op = "conv_transpose"
  x, w = _inputs(op, x, w)
  n = x.ndim - 2
  if x.ndim < 3 or x.ndim > 5 or w.ndim != x.ndim:
    geom.make(op, x.shape, w.shape, 1, "VALID", 1, 1, 1)  # raises the rank error
  if not isinstance(transpose_kernel, bool):
    raise TypeError(f"{op}: transpose_kernel must be a bool, got {transpose_kernel!r}")
  window = tuple(w.shape[:n])
  strides_t = geom.ints(op, "strides", strides, n)
  kd = geom.ints(op, "kernel_dilation", kernel_dilation, n)
  pads = geom.transpose_pads(op, padding, window, strides_t, kd)
  if transpose_kernel:
    w = jnp.swapaxes(jnp.flip(w, axis=tuple(range(n))), -1, -2)
  g, _ = geom.make(op, x.shape, w.shape, 1, pads, strides_t, kd, 1)
  return _execute(
    _decide(
      op,
      x,
      w,
      bias,
      residual,
      g,
      None,
      activation,
      approximate,
      negative_slope,
      elu_alpha,
      alpha,
      beta,
      preferred_element_type,
      algorithm,
      implementation,
    )
  )
