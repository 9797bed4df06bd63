"""Sharding for ops whose operands share leading (row) dims.

Each operand and result has a role:
  "row"    [*lead, D]        rows split across devices, D kept whole;
  "stat"   [*lead]           one value per row;
  "param"  [*lead[:g], D]    per-group parameters (g = 0: shared by all rows);
  "row:e"  [*lead, E]        rows like "row" with another width, factor
                             named e (a GLU's output is half its split
                             input's; per-sample group statistics);
  "param:e" [*lead[:g], E]   parameters with their own width, factor named
                             e (a convolution's weights and bias).
A "param" *result* of a reducing op (a parameter gradient) is a sum over the
rows, so each shard computes its part and a psum over the row-sharding mesh
axes completes it. Nothing else communicates: sharded rows stay in place.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

ROW, STAT, PARAM = "row", "stat", "param"


def row_of(factor: str) -> str:
  """The role of rows whose last dim has its own width (factor name)."""
  return f"row:{factor}"


ROW_ALT = row_of("e")


def param_of(factor: str) -> str:
  """The role of parameters whose last dim has its own width (factor name)."""
  return f"param:{factor}"


def _is_param(role: str) -> bool:
  return role == PARAM or role.startswith("param:")


@dataclass(frozen=True)
class LeadingDimsSharding:
  n_lead: int  # leading (row) dims of a "row" operand
  n_groups: int  # leading dims that the params also carry
  in_roles: tuple
  out_roles: tuple
  reduces_params: bool  # "param" results are sums over rows

  def _names(self, role):
    lead = [f"r{i}" for i in range(self.n_lead)]
    if role == ROW:
      return lead + ["d"]
    if role == STAT:
      return lead
    if role.startswith("row:"):
      return lead + [role[4:]]
    if role.startswith("param:"):
      return lead[: self.n_groups] + [role[6:]]
    return lead[: self.n_groups] + ["d"]

  def rule(self) -> str:
    lhs = ", ".join(" ".join(self._names(r)) for r in self.in_roles)
    rhs = ", ".join(" ".join(self._names(r)) for r in self.out_roles)
    return f"{lhs} -> {rhs}"

  def need_replication_factors(self) -> tuple:
    # Every factor but the leading dims, in the order the rule first names
    # them (Shardy wants them sorted).
    names = self.rule().replace(",", " ").replace("->", " ").split()
    lead = {f"r{i}" for i in range(self.n_lead)}
    return tuple(f for f in dict.fromkeys(names) if f not in lead)

  def _lead_spec(self, mesh, arg_shapes):
    # Rows follow the first "row" operand; the normalized dim never splits.
    idx = next(i for i, r in enumerate(self.in_roles) if r == ROW or r.startswith("row:"))
    sharding = arg_shapes[idx].sharding
    spec = tuple(sharding.spec) if isinstance(sharding, NamedSharding) else ()
    spec = spec + (None,) * (self.n_lead + 1 - len(spec))
    return spec[: self.n_lead]

  def _spec(self, role, lead):
    if role == ROW or role.startswith("row:"):
      return P(*lead, None)
    if role == STAT:
      return P(*lead)
    return P(*lead[: self.n_groups], None)

  def explicit_results(self, avals_in, avals_out):
    """Under a mesh whose axes are all explicit (jax.make_mesh's default),
    the results typed with the shardings the partitioning gives them: rows
    follow the first row operand, parameters replicated (else the types say
    replicated, and the next op would all-gather the rows). Otherwise
    avals_out as they are."""
    idx = next(i for i, r in enumerate(self.in_roles) if r == ROW or r.startswith("row:"))
    sharding = getattr(avals_in[idx], "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    types = tuple(getattr(mesh, "axis_types", ()) or ())
    if not types or any(t != AxisType.Explicit for t in types):
      return avals_out
    spec = tuple(sharding.spec) + (None,) * (self.n_lead + 1)
    lead = spec[: self.n_lead]
    return tuple(
      o.update(sharding=NamedSharding(mesh, self._spec(r, lead)))
      for o, r in zip(avals_out, self.out_roles)
    )

  def infer_from_operands(self, mesh, arg_shapes, result_shape):
    lead = self._lead_spec(mesh, arg_shapes)
    return tuple(NamedSharding(mesh, self._spec(r, lead)) for r in self.out_roles)

  def partition(self, call, mesh, arg_shapes, result_shape):
    lead = self._lead_spec(mesh, arg_shapes)
    arg_shardings = tuple(NamedSharding(mesh, self._spec(r, lead)) for r in self.in_roles)
    out_shardings = tuple(NamedSharding(mesh, self._spec(r, lead)) for r in self.out_roles)
    reduce_axes = _mesh_axes(lead[self.n_groups :])

    def psum(o):
      # 16-bit parameter gradients are summed over the shards in float32 and
      # rounded once more, not accumulated in 16 bits shard by shard.
      if jax.numpy.dtype(o.dtype).itemsize < 4:
        return jax.lax.psum(o.astype(jax.numpy.float32), reduce_axes).astype(o.dtype)
      return jax.lax.psum(o, reduce_axes)

    def per_shard(*args):
      outs = call(*args)
      if not (self.reduces_params and reduce_axes):
        return outs
      return tuple(psum(o) if _is_param(r) else o for o, r in zip(outs, self.out_roles))

    return mesh, per_shard, out_shardings, arg_shardings


def _mesh_axes(spec_entries) -> tuple:
  axes = []
  for e in spec_entries:
    if e is None:
      continue
    axes.extend(e if isinstance(e, tuple) else (e,))
  return tuple(axes)
