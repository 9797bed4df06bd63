"""The ResNet demo's images, generated (no download): 32x32 RGB pictures of
one of six shapes (disc, ring, square, triangle, cross, bars) at a random
place, size and colour on a noisy background of another colour. Deterministic
for a seed; numpy only."""

from __future__ import annotations

import numpy as np

CLASSES = ("disc", "ring", "square", "triangle", "cross", "bars")
SIZE = 32


def _mask(kind, yy, xx, cy, cx, r, rng):
  dy, dx = yy - cy, xx - cx
  if kind == "disc":
    return dy**2 + dx**2 <= r**2
  if kind == "ring":
    d = np.sqrt(dy**2 + dx**2)
    return (d <= r) & (d >= 0.55 * r)
  if kind == "square":
    return (np.abs(dy) <= 0.8 * r) & (np.abs(dx) <= 0.8 * r)
  if kind == "triangle":
    return (dy <= 0.7 * r) & (dy >= -r + 2 * np.abs(dx))
  if kind == "cross":
    arm = 0.3 * r
    return ((np.abs(dy) <= arm) & (np.abs(dx) <= r)) | ((np.abs(dx) <= arm) & (np.abs(dy) <= r))
  period = max(2.0, r / 2)  # bars: stripes inside a square
  inside = (np.abs(dy) <= r) & (np.abs(dx) <= r)
  return inside & ((np.floor((dx + r) / period) % 2) == 0)


def make(n, seed=0):
  """(images [n, 32, 32, 3] float32 in about [-1, 1], labels [n] int32)."""
  rng = np.random.default_rng(seed)
  yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
  images = np.empty((n, SIZE, SIZE, 3), np.float32)
  labels = rng.integers(0, len(CLASSES), n).astype(np.int32)
  for i in range(n):
    r = rng.uniform(5.0, 11.0)
    cy, cx = rng.uniform(r, SIZE - r, 2)
    fg, bg = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, 3)
    while np.abs(fg - bg).sum() < 1.0:
      fg = rng.uniform(-1, 1, 3)
    m = _mask(CLASSES[labels[i]], yy, xx, cy, cx, r, rng)[..., None]
    img = np.where(m, fg, bg) + rng.normal(0, 0.15, (SIZE, SIZE, 3))
    images[i] = img.astype(np.float32)
  return images, labels
