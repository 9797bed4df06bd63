"""The one place jaxdnn touches jax internals.

1. Device registry. A multi-device jit lowers without a device assignment unless a primitive
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


# 2. Varying manual axes. Inside shard_map every aval records the mesh axes it
# varies over, and custom_vjp insists that a backward's results carry the same
# as the primal inputs. A primitive's abstract eval must therefore pass them
# on; the aval field is not public and has moved between jax versions
# (`vma` in newer jax, `mat.varying` in others), hence this shim.


def varying_axes(aval) -> frozenset:
  vma = getattr(aval, "vma", None)
  if vma is not None:
    return frozenset(vma)
  mat = getattr(aval, "mat", None)
  return frozenset(getattr(mat, "varying", None) or ())


def with_varying_axes(aval, axes: frozenset, like):
  """`aval` varying over `axes`, on the (manual) mesh of the operand aval `like`."""
  if not axes:
    return aval
  if hasattr(aval, "vma"):
    return aval.update(vma=frozenset(axes))
  mat = getattr(aval, "mat", None)
  if mat is None or not hasattr(mat, "update"):
    return aval
  from jax.sharding import NamedSharding, PartitionSpec

  sharding = NamedSharding(like.sharding.mesh, PartitionSpec(*([None] * len(aval.shape))))
  return aval.update(sharding=sharding, manual_axis_type=mat.update(varying=frozenset(axes)))
