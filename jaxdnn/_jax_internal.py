"""The one place jaxdnn touches jax._src.

Why: a multi-device jit lowers without a device assignment unless a primitive
in the program is registered as needing one, and custom_partitioning (which
our lowerings use to shard rows without an all-gather) needs the devices.
jax's own cuDNN attention primitives register themselves in the same set; no
public API exposes it. If the registry moves, sharded lowering fails loudly
(custom_partitioning asserts), single-device use is unaffected.
"""

from __future__ import annotations


def mark_requires_devices(primitive) -> None:
  try:
    from jax._src import dispatch
  except ImportError:  # pragma: no cover - layout of a future jax
    return
  registry = getattr(dispatch, "prim_requires_devices_during_lowering", None)
  if registry is not None:
    registry.add(primitive)
