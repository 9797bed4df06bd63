"""Pooling geometry at trace time: Flax's window_shape, strides and padding
("SAME", "VALID", or (low, high) pairs) checked, with errors that name the
argument, and turned into output sizes and padding per spatial dim."""

from __future__ import annotations

import dataclasses
import numbers


@dataclasses.dataclass(frozen=True)
class Geometry:
  spatial: tuple  # input spatial dims
  window: tuple
  strides: tuple
  dilation: tuple
  pads: tuple  # ((low, high), ...)
  out: tuple

  def padded3(self, values, fill):
    """A per-spatial-dim tuple as 3 entries, leading dims filled (1D, 2D)."""
    return (fill,) * (3 - len(values)) + tuple(values)


def _ints(op, name, value, n, minimum=1):
  if isinstance(value, numbers.Integral) and not isinstance(value, bool):
    value = (value,) * n
  if not isinstance(value, (tuple, list)) or len(value) != n:
    raise ValueError(f"{op}: {name} must be {n} ints (one per spatial dim), got {value!r}")
  for v in value:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
      raise ValueError(f"{op}: {name} entries must be ints >= {minimum}, got {value!r}")
  return tuple(int(v) for v in value)


def make(op, shape, window_shape, strides, padding, dilation=None):
  if len(shape) < 3 or len(shape) > 5:
    raise ValueError(
      f"{op}: x must be [batch, *spatial, channels] with 1-3 spatial dims, got {shape}"
    )
  spatial = tuple(shape[1:-1])
  n = len(spatial)
  window = _ints(op, "window_shape", window_shape, n)
  strides = _ints(op, "strides", 1 if strides is None else strides, n)
  dilation = _ints(op, "dilation", 1 if dilation is None else dilation, n)
  span = tuple((w - 1) * d + 1 for w, d in zip(window, dilation))
  if isinstance(padding, str):
    if padding not in ("SAME", "VALID"):
      raise ValueError(
        f"{op}: padding must be 'SAME', 'VALID' or (low, high) pairs, got {padding!r}"
      )
    if padding == "VALID":
      pads = ((0, 0),) * n
    else:
      pads = []
      for size, s, k in zip(spatial, strides, span):
        out = -(-size // s)
        total = max((out - 1) * s + k - size, 0)
        pads.append((total // 2, total - total // 2))
      pads = tuple(pads)
  else:
    ok = isinstance(padding, (tuple, list)) and len(padding) == n
    ok = ok and all(
      isinstance(p, (tuple, list))
      and len(p) == 2
      and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0 for v in p)
      for p in padding
    )
    if not ok:
      raise ValueError(
        f"{op}: padding must be 'SAME', 'VALID' or {n} (low, high) pairs of ints >= 0, "
        f"got {padding!r}"
      )
    pads = tuple((int(lo), int(hi)) for lo, hi in padding)
  out = tuple(
    (size + lo + hi - k) // s + 1 if size + lo + hi >= k else 0
    for size, (lo, hi), k, s in zip(spatial, pads, span, strides)
  )
  return Geometry(spatial, window, strides, dilation, pads, out)


def adaptive(op, shape, output_size):
  """PyTorch's adaptive windows: output o of a dim covers inputs
  [floor(o in / out), ceil((o + 1) in / out)); `window` is the largest span
  (the kernels' loop bound), strides and dilation 1, no padding."""
  if len(shape) < 3 or len(shape) > 5:
    raise ValueError(
      f"{op}: x must be [batch, *spatial, channels] with 1-3 spatial dims, got {shape}"
    )
  spatial = tuple(shape[1:-1])
  out = _ints(op, "output_size", output_size, len(spatial))
  window = tuple(
    max(-(-(o + 1) * s // n) - (o * s) // n for o in range(n)) for s, n in zip(spatial, out)
  )
  ones = (1,) * len(spatial)
  return Geometry(spatial, window, ones, ones, ((0, 0),) * len(spatial), out)
