"""Convolution geometry at trace time: Flax's strides, padding ("SAME",
"VALID", "CIRCULAR", "REFLECT", "CAUSAL", an int, ints or (low, high) pairs
per spatial dim), input_dilation, kernel_dilation and feature_group_count
checked with errors that name the argument, and turned into the one
problem every kernel takes: lax.conv_general_dilated's (window strides,
explicit padding, lhs and rhs dilation, groups)."""

from __future__ import annotations

import dataclasses
import numbers

# lax.conv_general_dilated's dimension numbers, channels-last, by spatial rank.
SPECS = {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC"), 3: ("NDHWC", "DHWIO", "NDHWC")}
# Paddings that copy the input first (jnp.pad), then convolve VALID.
PAD_MODES = {"CIRCULAR": "wrap", "REFLECT": "reflect"}


@dataclasses.dataclass(frozen=True)
class Geometry:
  batch: int
  spatial: tuple  # input spatial dims (before input dilation)
  window: tuple  # kernel spatial dims
  in_channels: int
  out_channels: int
  groups: int
  strides: tuple
  input_dilation: tuple
  kernel_dilation: tuple
  pads: tuple  # ((low, high), ...) on the dilated input
  out: tuple  # output spatial dims

  @property
  def ndim(self) -> int:
    return len(self.spatial)

  def padded3(self, values, fill):
    """A per-spatial-dim tuple as 3 entries, leading dims filled (1D, 2D)."""
    return (fill,) * (3 - len(values)) + tuple(values)

  def attributes(self) -> tuple:
    """The geometry as the FFI attributes' 3-entry dims (cpp/conv/problem.h)."""
    return (
      self.padded3(self.spatial, 1),
      self.padded3(self.out, 1),
      self.padded3(self.window, 1),
      self.padded3(self.strides, 1),
      self.padded3(self.input_dilation, 1),
      self.padded3(self.kernel_dilation, 1),
      self.padded3(tuple(lo for lo, _ in self.pads), 0),
    )

  def flops(self) -> int:
    """2 x the multiply-adds of the convolution (every tap, padding included)."""
    taps = 1
    for k in self.window:
      taps *= k
    positions = 1
    for o in self.out:
      positions *= o
    return 2 * self.batch * positions * self.out_channels * taps * (self.in_channels // self.groups)


def ints(op, name, value, n, minimum=1):
  """An int or n ints, each >= minimum, as a tuple of n."""
  if isinstance(value, numbers.Integral) and not isinstance(value, bool):
    value = (value,) * n
  if not isinstance(value, (tuple, list)) or len(value) != n:
    raise ValueError(
      f"{op}: {name} must be an int or {n} ints (one per spatial dim), got {value!r}"
    )
  for v in value:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
      raise ValueError(f"{op}: {name} entries must be ints >= {minimum}, got {value!r}")
  return tuple(int(v) for v in value)


def _int(v):
  return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def explicit_pads(op, padding, n):
  """Flax's canonical padding: an int, or per dim an int or a (low, high)
  pair; negative entries crop, as lax's do."""
  if _int(padding):
    return ((int(padding), int(padding)),) * n
  if isinstance(padding, (tuple, list)) and len(padding) == n:
    pads = []
    for p in padding:
      if _int(p):
        pads.append((int(p), int(p)))
      elif isinstance(p, (tuple, list)) and len(p) == 2 and all(_int(v) for v in p):
        pads.append((int(p[0]), int(p[1])))
      else:
        break
    if len(pads) == n:
      return tuple(pads)
  raise ValueError(
    f"{op}: padding must be 'SAME', 'VALID', 'CIRCULAR', 'REFLECT', 'CAUSAL' (1D), an int, "
    f"or {n} ints or (low, high) pairs of ints, got {padding!r}"
  )


def _same(spatial, strides, span):
  pads = []
  for size, s, k in zip(spatial, strides, span):
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    pads.append((total // 2, total - total // 2))
  return tuple(pads)


def make(
  op, x_shape, w_shape, strides, padding, input_dilation, kernel_dilation, feature_group_count
):
  """The Geometry of conv(x, w) with Flax's arguments, and the jnp.pad mode
  to apply to x first ("wrap" / "reflect" for CIRCULAR / REFLECT, else None)
  with its pads."""
  if len(x_shape) < 3 or len(x_shape) > 5:
    raise ValueError(
      f"{op}: x must be [batch, *spatial, channels] with 1-3 spatial dims, got shape {x_shape}"
    )
  n = len(x_shape) - 2
  if len(w_shape) != n + 2:
    raise ValueError(
      f"{op}: w must be [*window, in_channels // feature_group_count, out_channels] with "
      f"{n} spatial dims (x has {n}), got shape {w_shape}"
    )
  if not _int(feature_group_count) or feature_group_count < 1:
    raise ValueError(f"{op}: feature_group_count must be an int >= 1, got {feature_group_count!r}")
  groups = int(feature_group_count)
  cin, cin_g, cout = x_shape[-1], w_shape[-2], w_shape[-1]
  if cin % groups:
    raise ValueError(f"{op}: x's {cin} channels must be a multiple of feature_group_count={groups}")
  if cin_g * groups != cin:
    raise ValueError(
      f"{op}: w's input channels ({cin_g}) times feature_group_count ({groups}) must be x's "
      f"channels ({cin}), got w shape {w_shape}"
    )
  if cout % groups or cout == 0:
    raise ValueError(
      f"{op}: w's {cout} output channels must be a positive multiple of "
      f"feature_group_count={groups}"
    )
  window = tuple(int(k) for k in w_shape[:n])
  if any(k < 1 for k in window):
    raise ValueError(f"{op}: w's window dims must be >= 1, got shape {w_shape}")
  strides = ints(op, "strides", 1 if strides is None else strides, n)
  input_dilation = ints(op, "input_dilation", 1 if input_dilation is None else input_dilation, n)
  kernel_dilation = ints(
    op, "kernel_dilation", 1 if kernel_dilation is None else kernel_dilation, n
  )
  spatial = tuple(int(s) for s in x_shape[1:-1])
  span = tuple((k - 1) * d + 1 for k, d in zip(window, kernel_dilation))
  pad_mode = None
  if isinstance(padding, str):
    if padding not in ("SAME", "VALID", "CAUSAL", *PAD_MODES):
      explicit_pads(op, padding, n)  # raises the message listing the forms
    if padding != "VALID" and any(d != 1 for d in input_dilation):
      raise ValueError(
        f"{op}: padding={padding!r} with input_dilation {input_dilation} is undefined (as in "
        "lax.conv_general_dilated): give explicit (low, high) pairs"
      )
    if padding == "VALID":
      pads = ((0, 0),) * n
    elif padding == "SAME":
      pads = _same(spatial, strides, span)
    elif padding == "CAUSAL":
      if n != 1:
        raise ValueError(f"{op}: padding='CAUSAL' is for 1D convolutions, x has {n} spatial dims")
      pads = ((span[0] - 1, 0),)
    else:
      pad_mode = PAD_MODES[padding]
      wrap = tuple(((k - 1) // 2, k // 2) for k in span)
      if pad_mode == "reflect" and any(max(lo, hi) >= s for (lo, hi), s in zip(wrap, spatial)):
        raise ValueError(
          f"{op}: padding='REFLECT' needs each spatial dim larger than half the dilated "
          f"window, got x spatial {spatial} and window span {span}"
        )
      spatial = tuple(s + lo + hi for s, (lo, hi) in zip(spatial, wrap))
      pads = ((0, 0),) * n
      pad_mode = (pad_mode, wrap)
  else:
    pads = explicit_pads(op, padding, n)
  dilated = tuple((s - 1) * d + 1 if s > 0 else 0 for s, d in zip(spatial, input_dilation))
  out = []
  for size, (lo, hi), k, s in zip(dilated, pads, span, strides):
    padded = size + lo + hi
    if padded < k:
      raise ValueError(
        f"{op}: the (dilated) kernel is larger than the padded input: window span {span} "
        f"over padded input {tuple(d + lo + hi for d, (lo, hi) in zip(dilated, pads))}"
      )
    out.append((padded - k) // s + 1)
  if x_shape[0] < 0:
    raise ValueError(f"{op}: x's batch must be >= 0, got {x_shape}")
  g = Geometry(
    batch=int(x_shape[0]),
    spatial=spatial,
    window=window,
    in_channels=int(cin),
    out_channels=int(cout),
    groups=groups,
    strides=strides,
    input_dilation=input_dilation,
    kernel_dilation=kernel_dilation,
    pads=pads,
    out=tuple(out),
  )
  return g, pad_mode


def transpose_pads(op, padding, window, strides, kernel_dilation):
  """lax.conv_transpose's padding of the equivalent input-dilated
  convolution: "SAME" / "VALID" as lax computes them, explicit pairs as given."""
  n = len(window)
  if isinstance(padding, str):
    if padding == "CIRCULAR":
      raise ValueError(
        f"{op}: padding='CIRCULAR' is not supported by jaxdnn's conv_transpose yet; use "
        "'SAME', 'VALID' or explicit (low, high) pairs"
      )
    if padding not in ("SAME", "VALID"):
      raise ValueError(
        f"{op}: padding must be 'SAME', 'VALID', an int, or {n} ints or (low, high) pairs, "
        f"got {padding!r}"
      )
    pads = []
    for k, s, d in zip(window, strides, kernel_dilation):
      k = (k - 1) * d + 1
      if padding == "SAME":
        total = k + s - 2
        lo = k - 1 if s > k - 1 else -(-total // 2)
      else:
        total = k + s - 2 + max(k - s, 0)
        lo = k - 1
      pads.append((lo, total - lo))
    return tuple(pads)
  return explicit_pads(op, padding, n)
