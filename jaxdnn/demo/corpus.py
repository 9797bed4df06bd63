"""Real text on every machine: the source files of Python's own standard
library, read in a fixed order, as bytes (a 256-symbol vocabulary)."""

from __future__ import annotations

import os

import numpy as np


def stdlib_bytes(limit=2 << 20):
  """Up to `limit` bytes of the standard library's .py files, sorted by path,
  with test suites and vendored packages left out."""
  root = os.path.dirname(os.__file__)
  chunks, total = [], 0
  for dirpath, dirnames, filenames in os.walk(root):
    dirnames[:] = sorted(
      d for d in dirnames if d not in ("test", "tests", "site-packages", "idlelib")
    )
    for name in sorted(filenames):
      if not name.endswith(".py"):
        continue
      try:
        with open(os.path.join(dirpath, name), "rb") as f:
          data = f.read()
      except OSError:
        continue
      chunks.append(data)
      total += len(data)
      if total >= limit:
        return np.frombuffer(b"".join(chunks)[:limit], np.uint8)
  return np.frombuffer(b"".join(chunks), np.uint8)


def split(data, valid_fraction=0.05):
  cut = int(len(data) * (1 - valid_fraction))
  return data[:cut], data[cut:]


def batches(data, rng, batch, seq):
  """Random windows: inputs [batch, seq] and the next bytes as targets."""
  starts = rng.integers(0, len(data) - seq - 1, size=batch)
  idx = starts[:, None] + np.arange(seq + 1)[None, :]
  win = data[idx].astype(np.int32)
  return win[:, :-1], win[:, 1:]
