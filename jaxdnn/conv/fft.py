"""The FFT convolution (algorithm="fft"): long windows at a cost that does
not grow with the window.

A stride-1 convolution is a correlation, so with every spectrum taken at a
size M >= the padded input P (per spatial dim) no circular wrap reaches the
outputs kept:

  forward:  Y  = X conj(W)      y  = irfft(Y)[:out]
  dgrad:    DX = DZ W           dx = irfft(DX)[:P], the padding cropped
  wgrad:    DW = X conj(DZ)     dw = irfft(DW)[:window]

with X, W, DZ the real FFTs of the padded input, the (dilated) window and
the pre-activation's gradient, each a product summed over channels per
frequency (and group). The FFTs are XLA's (cuFFT on a GPU, DUCC on the
CPU), in float32 whatever the dtype; the per-frequency channel mixing is
jaxdnn's kernel (cpp/conv/fft/), one primitive for the three directions;
the epilogue and its derivative are elementwise XLA ops around them. M is
the smallest size >= P with no prime factor above 7, which the FFT
libraries take at full speed.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn._primitive import (
  ComposedOp,
  FfiOp,
  batch_size,
  match_vma,
  not_mapped,
  shaped,
  to_front,
  vma_token,
)
from jaxdnn._sharding import ROW, LeadingDimsSharding, param_of, row_of
from jaxdnn.activations import kinds
from jaxdnn.conv import reference
from jaxdnn.conv.primitives import SAVE_NOTHING, SAVE_OUTPUT, SAVE_PREACT

FORWARD, DGRAD, WGRAD = 0, 1, 2
_OUT = row_of("o")
_WEIGHTS = param_of("w")
# The default picks the FFT at this many window taps or more (stride 1), per
# platform. CUDA, measured on an H200 at 16 x 8192 x 64 -> 64
# (docs/perf/conv.md): against XLA's convolution forward+backward 0.51x at
# 64 taps, 0.96x at 128, 1.45x at 256, 6.9x at 1024 (the FFT's cost barely
# moves with the window). CPU, 4 x 2048 x 32 -> 32 against the CPU's
# implicit GEMM: fwd+bwd 0.79x at 16 taps, 1.37x at 32, 3.2x at 64 (and
# the forward alone wins from 64).
DEFAULT_MIN_TAPS = {"cuda": 256, "cpu": 64}


def serves(g) -> bool:
  """Whether the FFT path takes the problem: stride 1, no input dilation
  (any padding, kernel dilation, groups, 1-3 spatial dims)."""
  return all(s == 1 for s in g.strides) and all(d == 1 for d in g.input_dilation)


def default_serves(g, platform) -> bool:
  """Whether the default (no algorithm asked for) runs the FFT on `platform`
  ("cpu" or "cuda"): a 1-D window of DEFAULT_MIN_TAPS[platform] taps or
  more. Only 1-D was measured; on the CPU an 8x8 window and a 4x4x4 one ran
  1.3x and 3.3x slower forward+backward through the FFT than the implicit
  GEMM, so 2-D and 3-D take it only when asked (or autotuned)."""
  return g.ndim == 1 and serves(g) and math.prod(g.window) >= DEFAULT_MIN_TAPS[platform]


def fast_size(n: int) -> int:
  """The smallest m >= n whose prime factors are all <= 7."""
  m = max(int(n), 1)
  while True:
    r = m
    for p in (2, 3, 5, 7):
      while r % p == 0:
        r //= p
    if r == 1:
      return m
    m += 1


class Plan(NamedTuple):
  """The sizes of one FFT convolution (hashable: custom_vjp's static)."""

  g: object  # geometry.Geometry
  sizes: tuple  # M per spatial dim
  act: int
  act_param: float
  saved: int  # what the backward's activation derivative reads (primitives.SAVE_*)
  alpha: float
  beta: float
  out_dtype: str
  bias_dtype: str  # "" without a bias
  residual_dtype: str  # "" without a residual
  implementation: str | None

  @property
  def dilated_window(self):
    return tuple((k - 1) * d + 1 for k, d in zip(self.g.window, self.g.kernel_dilation))

  @property
  def freqs(self) -> int:
    return math.prod(half(self.sizes))


def half(sizes):
  """The real FFT's frequency dims for transform sizes `sizes`: the last halved."""
  return (*sizes[:-1], sizes[-1] // 2 + 1)


def fft_sizes(g):
  """M per spatial dim: the padded input's length rounded up to a fast size."""
  return tuple(fast_size(n + lo + hi) for n, (lo, hi) in zip(g.spatial, g.pads))


def make_plan(g, act, act_param, saved, alpha, beta, out_dtype, bias, residual, implementation):
  return Plan(
    dataclasses.replace(g, batch=0), fft_sizes(g), act, act_param, saved, alpha, beta,
    str(np.dtype(out_dtype)),
    "" if bias is None else str(np.dtype(bias.dtype)),
    "" if residual is None else str(np.dtype(residual.dtype)), implementation,
  )  # fmt: skip


class FftMix(FfiOp):
  """The per-frequency channel mixing (cpp/conv/fft/fft_mix.h), operands
  complex64 with the frequency last: forward (X [N, C_in F], W [C_in/g
  C_out F]) -> Y [N, C_out F]; dgrad (DZ [N, C_out F], W) -> DX [N, C_in F];
  wgrad (X, DZ) -> DW [C_in/g C_out F]."""

  name = target = "jaxdnn_conv_fft_mix"
  typed_shardings = True

  def abstract_eval(self, a, b, *, mode, in_channels, out_channels, groups, freqs, **_):
    n = a.shape[0]
    if mode == FORWARD:
      return [shaped((n, out_channels * freqs), jnp.complex64)]
    if mode == DGRAD:
      return [shaped((n, in_channels * freqs), jnp.complex64)]
    return [shaped((in_channels // groups * out_channels * freqs,), jnp.complex64)]

  def ffi_attributes(self, *, mode, in_channels, out_channels, groups, freqs, **_):
    return dict(
      mode=np.int32(mode),
      in_channels=np.int64(in_channels),
      out_channels=np.int64(out_channels),
      groups=np.int64(groups),
      freqs=np.int64(freqs),
    )

  def batch(self, args, dims, *, mode, in_channels, out_channels, groups, freqs, **params):
    """A vmapped axis folds into the batch where the weights are shared
    (forward, dgrad), else into the groups (each index its own weights, as
    conv's primitives do)."""
    size = batch_size(args, dims)
    a, b = args
    da, db = dims
    if mode != WGRAD and db is not_mapped:
      a = jnp.moveaxis(a, da, 0)
      n = a.shape[1]
      out = self.bind(
        a.reshape((size * n, a.shape[-1])), b, mode=mode, in_channels=in_channels,
        out_channels=out_channels, groups=groups, freqs=freqs, **params,
      )[0]  # fmt: skip
      return [out.reshape((size, n, out.shape[-1]))], [0]
    a, b = to_front(a, da, size), to_front(b, db, size)
    c_a = out_channels if mode == DGRAD else in_channels
    a = _fold_rows(a, c_a, freqs)
    b = _fold_weights(b, in_channels // groups, out_channels, freqs) if mode != WGRAD else (
      _fold_rows(b, out_channels, freqs)
    )  # fmt: skip
    out = self.bind(
      a, b, mode=mode, in_channels=in_channels * size, out_channels=out_channels * size,
      groups=groups * size, freqs=freqs, **params,
    )[0]  # fmt: skip
    if mode == WGRAD:
      out = out.reshape(in_channels // groups, size, out_channels * freqs)
      return [
        jnp.moveaxis(out, 1, 0).reshape(size, in_channels // groups * out_channels * freqs)
      ], [0]
    c_out = in_channels if mode == DGRAD else out_channels
    out = out.reshape(out.shape[0], size, c_out * freqs)
    return [jnp.moveaxis(out, 1, 0)], [0]

  def sharding(self, avals_in, avals_out, *, mode, **_):
    if mode == FORWARD:
      return LeadingDimsSharding(1, 0, (ROW, _WEIGHTS), (_OUT,), reduces_params=False)
    if mode == DGRAD:
      return LeadingDimsSharding(1, 0, (_OUT, _WEIGHTS), (ROW,), reduces_params=False)
    return LeadingDimsSharding(1, 0, (ROW, _OUT), (_WEIGHTS,), reduces_params=True)


def _fold_rows(a, channels, freqs):
  """[V, N, C F] -> [N, V C F]: index v's channels a group set of their own."""
  v, n = a.shape[0], a.shape[1]
  return jnp.moveaxis(a.reshape(v, n, channels * freqs), 0, 1).reshape(n, v * channels * freqs)


def _fold_weights(w, cig, out_channels, freqs):
  """[V, C_in/g C_out F] -> [C_in/g, V C_out F]."""
  w = w.reshape(w.shape[0], cig, out_channels * freqs)
  return jnp.moveaxis(w, 0, 1).reshape(-1)


fft_mix = FftMix()


class SampleFfts(ComposedOp):
  """XLA's real FFTs of each sample, as a primitive partitioned along the
  batch: XLA's partitioners (Shardy and GSPMD, jax 0.10-0.11) gather a
  batch-sharded FFT's operand, which would undo batch sharding. Forward
  (inverse=False): [N, *spatial, C] flattened -> the spectrum [N, C F] at
  sizes M; inverse: [N, C F] -> [N, *keep, C] flattened, the first `keep`
  positions of each dim."""

  name = "jaxdnn_conv_fft_samples"
  typed_shardings = True

  def abstract_eval(self, a, *, inverse, spatial, channels, sizes, keep, **_):
    if inverse:
      return [shaped((a.shape[0], math.prod(keep) * channels), jnp.float32)]
    return [shaped((a.shape[0], channels * math.prod(half(sizes))), jnp.complex64)]

  def compute(self, a, *, inverse, spatial, channels, sizes, keep):
    n = a.shape[0]
    if not inverse:
      rows = jnp.moveaxis(a.reshape(n, *spatial, channels), -1, 1)
      spectrum = jnp.fft.rfftn(rows, s=sizes, axes=_spatial_axes(len(sizes)))
      return [spectrum.reshape(n, channels * math.prod(half(sizes)))]
    return [_inverse(a, sizes, n, channels, keep).reshape(n, channels * math.prod(keep))]

  def batch(self, args, dims, **params):
    (a,), (d,) = args, dims
    size = a.shape[d]
    a = jnp.moveaxis(a, d, 0)
    n = a.shape[1]
    out = self.bind(a.reshape((size * n, a.shape[-1])), **params)[0]
    return [out.reshape((size, n, out.shape[-1]))], [0]

  def sharding(self, avals_in, avals_out, **_):
    return LeadingDimsSharding(1, 0, (ROW,), (row_of("f"),), reduces_params=False)


sample_ffts = SampleFfts()


def _samples_spectrum(plan, a, spatial, channels):
  """The spectrum [N, C F] of a [N, *spatial, C] (float32) at the plan's sizes."""
  rows = a.reshape(a.shape[0], math.prod(a.shape[1:]))
  return sample_ffts.bind(
    rows, inverse=False, spatial=tuple(spatial), channels=channels, sizes=plan.sizes, keep=(),
    implementation=plan.implementation,
  )[0]  # fmt: skip


def _samples_inverse(plan, spectrum, channels, keep):
  """[N, C F] back to [N, *keep, C] (float32)."""
  n = spectrum.shape[0]
  out = sample_ffts.bind(
    spectrum, inverse=True, spatial=(), channels=channels, sizes=plan.sizes, keep=tuple(keep),
    implementation=plan.implementation,
  )[0]  # fmt: skip
  return out.reshape(n, *keep, channels)


def _mix(plan, mode, a, b):
  g = plan.g
  return fft_mix.bind(
    a, b, mode=mode, in_channels=g.in_channels, out_channels=g.out_channels, groups=g.groups,
    freqs=plan.freqs, implementation=plan.implementation,
  )[0]  # fmt: skip


def _spatial_axes(ndim):
  """The spatial axes of a [lead, channels, *spatial] array."""
  return tuple(range(2, 2 + ndim))


def _input_spectrum(plan, x):
  """X: x [N, *spatial, C_in] padded as the convolution pads it (negative
  pads crop), channels before the spatial dims, [N, C_in F]."""
  g = plan.g
  pads = [(0, 0, 0), *((lo, hi, 0) for lo, hi in g.pads), (0, 0, 0)]
  xp = jax.lax.pad(x.astype(jnp.float32), jnp.float32(0), pads)
  return _samples_spectrum(plan, xp, xp.shape[1:-1], g.in_channels)


def _weight_spectrum(plan, w):
  """W: w [*window, C_in/g, C_out] dilated by the kernel dilation, [C_in/g C_out F]."""
  g = plan.g
  n = g.ndim
  wd = jax.lax.pad(
    w.astype(jnp.float32), jnp.float32(0),
    [*((0, 0, d - 1) for d in g.kernel_dilation), (0, 0, 0), (0, 0, 0)],
  )  # fmt: skip
  wt = jnp.moveaxis(wd, (n, n + 1), (0, 1))
  return jnp.fft.rfftn(wt, s=plan.sizes, axes=_spatial_axes(n)).reshape(-1)


def _inverse(spectrum, sizes, lead, channels, keep):
  """irfft of [lead, channels, *half(sizes)] back to [lead, channels, *sizes],
  cut to `keep` per spatial dim, channels moved last: [lead, *keep, channels]."""
  s = spectrum.reshape(lead, channels, *half(sizes))
  r = jnp.fft.irfftn(s, s=sizes, axes=_spatial_axes(len(sizes)))
  r = r[(slice(None), slice(None), *(slice(0, k) for k in keep))]
  return jnp.moveaxis(r, 1, -1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fft_conv(plan, x, w, bias, residual):
  return _forward(plan, x, w, bias, residual)[0]


def _forward(plan, x, w, bias, residual):
  g = plan.g
  xf, wf = _input_spectrum(plan, x), _weight_spectrum(plan, w)
  yf = _mix(plan, FORWARD, xf, wf)
  c = _samples_inverse(plan, yf, g.out_channels, g.out)
  z = reference.epilogue_z(c, bias, residual, plan.alpha, plan.beta)
  y = kinds.function(plan.act, plan.act_param)(z).astype(plan.out_dtype)
  saved = {SAVE_NOTHING: None, SAVE_OUTPUT: y, SAVE_PREACT: z}[plan.saved]
  # The spectra are kept, not recomputed: the weights' is the largest FFT
  # of the three directions (C_in C_out per frequency).
  return y, (xf, wf, saved, vma_token(x), vma_token(w), vma_token(bias))


def _backward(plan, res, dy):
  xf, wf, saved, x_token, w_token, bias_token = res
  g = plan.g
  dz = reference.backprop(plan.act, plan.act_param, dy, saved).astype(jnp.float32)
  dres = (dz * plan.beta).astype(plan.residual_dtype) if plan.residual_dtype else None
  dbias = None
  if plan.bias_dtype:
    dbias = jnp.sum(dz, axis=tuple(range(dz.ndim - 1))).astype(plan.bias_dtype)
  dc = dz * plan.alpha if plan.alpha != 1.0 else dz
  dzf = _samples_spectrum(plan, dc, g.out, g.out_channels)
  padded = tuple(s + lo + hi for s, (lo, hi) in zip(g.spatial, g.pads))
  dxf = _mix(plan, DGRAD, dzf, wf)
  dxp = _samples_inverse(plan, dxf, g.in_channels, padded)
  # The padding's inverse: pads cropped, crops zero-filled.
  dx = jax.lax.pad(
    dxp, jnp.float32(0), [(0, 0, 0), *((-lo, -hi, 0) for lo, hi in g.pads), (0, 0, 0)]
  ).astype(x_token.dtype)
  dwf = _mix(plan, WGRAD, xf, dzf)
  dwd = _inverse(dwf, plan.sizes, g.in_channels // g.groups, g.out_channels, plan.dilated_window)
  # [C_in/g, *dilated window, C_out] -> the window's taps, [*window, C_in/g, C_out].
  dwd = dwd[(slice(None), *(slice(None, None, d) for d in g.kernel_dilation))]
  dw = jnp.moveaxis(dwd, 0, -2).astype(w_token.dtype)
  return dx, match_vma(dw, w_token), match_vma(dbias, bias_token), dres


_fft_conv.defvjp(_forward, _backward)


def conv(plan, x, w, bias, residual):
  """The convolution through the FFTs: x [N, *spatial, C_in], w [*window,
  C_in/g, C_out] -> [N, *out, C_out] with the epilogue."""
  return _fft_conv(plan, x, w, bias, residual)
