"""Sharding of the recurrent primitives: the batch split, nothing else.

The recurrence treats examples independently, so each shard runs its own
slice of the batch with no communication. The batch sits at a different axis
per operand (axis 1 of the time-major [T, B, ...] sequences, axis 0 of the
[B, H] states and of lengths [B]); time and feature dims never split; the
recurrent weights are shared (replicated). Their gradients are not the
primitives' (a GEMM over all steps in api.py, which XLA partitions). Empty
([0]) operands and results (the LSTM-only ones in the other modes) are
replicated.

Each operand and result is described by its dims' factor names, "b" the
batch; each distinct size gets its own name (Shardy refuses one factor for
dims of different sizes), an empty dim its own too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

BATCH = "b"


@dataclass(frozen=True)
class BatchAxisSharding:
  in_factors: tuple  # per operand: its dims' factor names
  out_factors: tuple  # per result

  def rule(self) -> str:
    side = lambda dims: ", ".join(" ".join(d) for d in dims)
    return f"{side(self.in_factors)} -> {side(self.out_factors)}"

  def need_replication_factors(self) -> tuple:
    # Every factor but the batch, in the order the rule first names them.
    names = [f for dims in self.in_factors + self.out_factors for f in dims]
    return tuple(f for f in dict.fromkeys(names) if f != BATCH)

  def _batch_entry(self, mesh, arg_shapes):
    """The mesh axes the batch splits over: those of the first batched
    operand's batch axis (None where it is replicated, or where they do not
    divide the batch evenly)."""
    idx = next(i for i, d in enumerate(self.in_factors) if BATCH in d)
    axis = self.in_factors[idx].index(BATCH)
    sharding = arg_shapes[idx].sharding
    spec = tuple(sharding.spec) if isinstance(sharding, NamedSharding) else ()
    entry = spec[axis] if axis < len(spec) else None
    axes = _mesh_axes(entry)
    if not axes:
      return None
    shards = math.prod(mesh.shape[a] for a in axes)
    if arg_shapes[idx].shape[axis] % shards:
      return None
    return entry

  @staticmethod
  def _specs(mesh, factors, entry):
    # The batch dim on `entry`'s mesh axes, every other dim whole.
    return tuple(
      NamedSharding(mesh, P(*(entry if f == BATCH else None for f in dims))) for dims in factors
    )

  def infer_from_operands(self, mesh, arg_shapes, result_shape):
    return self._specs(mesh, self.out_factors, self._batch_entry(mesh, arg_shapes))

  def partition(self, call, mesh, arg_shapes, result_shape):
    entry = self._batch_entry(mesh, arg_shapes)
    arg_shardings = self._specs(mesh, self.in_factors, entry)
    out_shardings = self._specs(mesh, self.out_factors, entry)
    return mesh, call, out_shardings, arg_shardings


# ---- sharding in types (meshes with Explicit axes, jax.make_mesh's default)
#
# There an array's type carries its sharding and jnp ops constrain their
# results to it: an untyped (replicated) result would make the op after it
# (the next layer's input projection) gather the batch. So the primitives'
# results carry the batch entry of their operands' types; a gradient of an
# operand carries that operand's type (custom_vjp checks they match).


def batch_entry(aval, axis):
  """The mesh axes on `axis` of aval's type (None: whole, or no typed mesh)."""
  sharding = getattr(aval, "sharding", None)
  if not isinstance(sharding, NamedSharding) or sharding.mesh.empty:
    return None
  spec = tuple(sharding.spec)
  return spec[axis] if axis < len(spec) else None


def typed(shape, like, factors=None, entry=None):
  """A float32 aval of `shape` on like's (typed) mesh: its dims named by
  `factors` split as `entry` at the batch, else whole; without a typed mesh
  an untyped aval."""
  sharding = getattr(like, "sharding", None)
  if not isinstance(sharding, NamedSharding) or sharding.mesh.empty:
    return jax.core.ShapedArray(tuple(shape), jnp.float32)
  factors = factors or ("",) * len(shape)
  spec = P(*(entry if f == BATCH else None for f in factors))
  return jax.core.ShapedArray(
    tuple(shape), jnp.float32, sharding=NamedSharding(sharding.mesh, spec)
  )


def _mesh_axes(entry) -> tuple:
  if entry is None:
    return ()
  return tuple(entry) if isinstance(entry, tuple) else (entry,)


def _lstm_only(lstm, dims):
  """dims for the LSTM, else the empty [0] operand's own factor."""
  return dims if lstm else ("z",)


def forward_sharding(mode) -> BatchAxisSharding:
  """gx, w_hh, b_hh, h0, c0, lengths -> out, h_n, c_n, saved, c_seq."""
  lstm = mode == "lstm"
  c_seq = _lstm_only(lstm, ("t", BATCH, "h"))
  return BatchAxisSharding(
    in_factors=(
      ("t", BATCH, "g"),
      ("h", "g"),
      ("g",),
      (BATCH, "h"),
      _lstm_only(lstm, (BATCH, "h")),
      (BATCH,),
    ),
    out_factors=(
      ("t", BATCH, "h"),
      (BATCH, "h"),
      _lstm_only(lstm, (BATCH, "h")),
      ("t", BATCH, "s"),
      c_seq,
    ),
  )


def backward_sharding(mode) -> BatchAxisSharding:
  """dout, dh_n, dc_n, w_hh, h0, c0, lengths, out, saved, c_seq
  -> dgx, dh0, dc0."""
  lstm = mode == "lstm"
  c_seq = _lstm_only(lstm, ("t", BATCH, "h"))
  return BatchAxisSharding(
    in_factors=(
      ("t", BATCH, "h"),
      (BATCH, "h"),
      _lstm_only(lstm, (BATCH, "h")),
      ("h", "g"),
      (BATCH, "h"),
      _lstm_only(lstm, (BATCH, "h")),
      (BATCH,),
      ("t", BATCH, "h"),
      ("t", BATCH, "s"),
      c_seq,
    ),
    out_factors=(
      ("t", BATCH, "g"),
      (BATCH, "h"),
      _lstm_only(lstm, (BATCH, "h")),
    ),
  )
