"""Sharding of attention over batch and heads, with no communication.

Every operand's axes are named by role: b (batch), t (query seq), s (key
seq), n (query heads), k (key/value heads), d (head dim). The batch and head
shardings of `query` decide everything: key/value follow on their heads when
their head count splits evenly (or is 1, MQA: then they are replicated); the
sequences and head dim stay whole on every device. A bias or mask that
broadcasts over batch or heads is replicated along that axis, and its
gradient is then a psum over the mesh axes that split it: the only
collective. Dropout seeds are shifted per shard so that every device draws
the bits the unsharded call would (see dropout.py: head h enters the hash as
h * 0x9E3779B9 + seed1).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

# Axis names by operand/result role; "B"/"N" mark a broadcastable bias/mask dim.
_AXES = {
  "q": "btnd",
  "out": "btnd",
  "dout": "btnd",
  "dq": "btnd",
  "k": "bskd",
  "v": "bskd",
  "dk": "bskd",
  "dv": "bskd",
  "lse": "bnt",
  "dlse": "bnt",
  "bias": "BNts",
  "mask": "BNts",
  "dbias": "BNts",
  "q_lengths": "b",
  "kv_lengths": "b",
  "q_segment_ids": "bt",
  "kv_segment_ids": "bs",
  "seeds": "bc",
  # paged_attention: the block pool (x blocks of y rows) stays whole on every
  # device, split only on its kv heads; block tables are per sequence (m: max blocks).
  "key_cache": "xykd",
  "value_cache": "xykd",
  "block_tables": "bm",
  "context_lengths": "b",
}


def _axes_of(spec_entry) -> tuple:
  if spec_entry is None:
    return ()
  return spec_entry if isinstance(spec_entry, tuple) else (spec_entry,)


def _entry(axes: tuple):
  if not axes:
    return None
  return axes[0] if len(axes) == 1 else axes


@dataclass(frozen=True)
class BatchHeadsSharding:
  in_kinds: tuple
  out_kinds: tuple
  in_shapes: tuple
  reduces_bias: bool

  def _full(self, kind):
    """(batch dim is full, head dim is full) of a bias/mask-like operand."""
    source = "bias" if kind == "dbias" else kind
    if source not in ("bias", "mask") or source not in self.in_kinds:
      return True, True
    shape = self.in_shapes[self.in_kinds.index(source)]
    return shape[0] != 1, shape[1] != 1

  def _factor_names(self, kind, which):
    names = []
    full = self._full(kind)
    for pos, a in enumerate(_AXES[kind]):
      if a in "BN":
        # A broadcast (size-1) dim gets a factor of its own.
        names.append(a.lower() if full[0 if a == "B" else 1] else f"{kind}_{which}{pos}")
      else:
        names.append(a)
    return names

  def rule(self) -> str:
    lhs = ", ".join(" ".join(self._factor_names(k, f"i{i}")) for i, k in enumerate(self.in_kinds))
    rhs = ", ".join(" ".join(self._factor_names(k, f"o{i}")) for i, k in enumerate(self.out_kinds))
    return f"{lhs} -> {rhs}"

  def need_replication_factors(self) -> tuple:
    # The factors the rule uses that must stay whole, in the rule's order of
    # first appearance (Shardy requires that order).
    present = []
    for kinds in (self.in_kinds, self.out_kinds):
      for kind in kinds:
        for a in _AXES[kind]:
          if a in "tsdcxym" and a not in present:
            present.append(a)
    return tuple(present)

  def _mesh_split(self, mesh, arg_shapes):
    """Mesh axes splitting the batch and the heads, as the query has them."""
    sharding = arg_shapes[0].sharding
    spec = tuple(sharding.spec) if isinstance(sharding, NamedSharding) else ()
    spec = spec + (None,) * (4 - len(spec))
    batch_axes, head_axes = _axes_of(spec[0]), _axes_of(spec[2])
    heads, kv_heads = self.in_shapes[0][2], self.in_shapes[1][2]
    shards = 1
    for a in head_axes:
      shards *= mesh.shape[a]
    if heads % shards:
      head_axes = ()
    kv_split = kv_heads % shards == 0 and kv_heads > 1
    if head_axes and not kv_split and kv_heads != 1:
      head_axes = ()  # kv heads cannot follow the query heads: keep heads whole
    return batch_axes, head_axes, kv_split and bool(head_axes)

  def _spec(self, kind, batch_axes, head_axes, kv_split):
    entries = []
    b_full, n_full = self._full(kind)
    for a in _AXES[kind]:
      if a == "b" or (a == "B" and b_full):
        entries.append(_entry(batch_axes))
      elif a == "n" or (a == "N" and n_full):
        entries.append(_entry(head_axes))
      elif a == "k":
        entries.append(_entry(head_axes) if kv_split else None)
      else:
        entries.append(None)
    return P(*entries)

  def _shardings(self, mesh, arg_shapes):
    split = self._mesh_split(mesh, arg_shapes)
    ins = tuple(NamedSharding(mesh, self._spec(k, *split)) for k in self.in_kinds)
    outs = tuple(NamedSharding(mesh, self._spec(k, *split)) for k in self.out_kinds)
    return split, ins, outs

  def infer_from_operands(self, mesh, arg_shapes, result_shape):
    return self._shardings(mesh, arg_shapes)[2]

  def partition(self, call, mesh, arg_shapes, result_shape):
    (batch_axes, head_axes, kv_split), ins, outs = self._shardings(mesh, arg_shapes)
    b_full, n_full = self._full("dbias")
    bias_reduce = (() if b_full else batch_axes) + (() if n_full else head_axes)
    local_heads = self.in_shapes[0][2]
    for a in head_axes:
      local_heads //= mesh.shape[a]

    def per_shard(*args):
      args = list(args)
      if "seeds" in self.in_kinds and head_axes:
        i = self.in_kinds.index("seeds")
        first_head = jax.lax.axis_index(head_axes).astype(jnp.uint32) * jnp.uint32(local_heads)
        args[i] = args[i].at[:, 1].add(first_head * jnp.uint32(0x9E3779B9))
      results = list(call(*args))
      if self.reduces_bias and bias_reduce and "dbias" in self.out_kinds:
        j = self.out_kinds.index("dbias")
        results[j] = jax.lax.psum(results[j], bias_reduce)
      if head_axes and not kv_split:
        # One key/value head replicated over head shards (MQA): each shard
        # holds its query heads' part of dk/dv.
        for name in ("dk", "dv"):
          if name in self.out_kinds:
            j = self.out_kinds.index(name)
            results[j] = jax.lax.psum(results[j], head_axes)
      return tuple(results)

    return mesh, per_shard, outs, ins
