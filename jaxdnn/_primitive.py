"""The one primitive base every jaxdnn op is built on.

An op subclasses `FfiOp` and declares:
  * `abstract_eval(*avals, **params)`: the result avals;
  * `batch(args, dims, **params)`: its vmap rule (a real rule, never a loop);
  * `sharding(avals_in, avals_out, **params)`: a `Sharding` object (see
    `jaxdnn._sharding`) giving the Shardy rule and the per-shard partitioning;
  * `ffi_attributes(**params)` and optionally `workspace(...)`: what the FFI
    handler receives, and scratch results XLA must allocate on a platform.

Every op's params include `implementation` (None, "cpu" or "cuda"); the
lowering for a platform refuses an explicit implementation of another.

Sharding: the lowering wraps the FFI call in
`jax.experimental.custom_partitioning` with a Shardy `sharding_rule`. A bare
Shardy rule on the custom call only guides propagation; XLA's partitioner
would still replicate (all-gather) the operands of an unknown custom call.
custom_partitioning also lets an op run per shard and add the one collective
it needs (a psum of parameter gradients), so sharded rows never move.
On one device custom_partitioning inlines the plain FFI call.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from jaxdnn import _jax_internal, _platform

# Platform names as `mlir.register_lowering` spells them.
_PLATFORMS = ("cpu", "cuda")


class FfiOp:
  """A JAX primitive lowered to one XLA FFI target on CPU and CUDA."""

  name: str = ""
  target: str = ""
  # Under a mesh with explicit axes, type the results with the shardings the
  # partitioning gives them (LeadingDimsSharding.explicit_results); untyped,
  # a reshape after the FFT convolution's inverse all-gathered the rows.
  # Opt-in: on for every family, attention's, the recurrences' and group
  # norm's sharding tests fail (custom_vjp's type checks among them).
  typed_shardings: bool = False

  def __init__(self):
    self.primitive = Primitive(self.name)
    self.primitive.multiple_results = True
    self.primitive.def_impl(self._eager_impl)
    self.primitive.def_abstract_eval(self._abstract_eval)
    batching.primitive_batchers[self.primitive] = self.batch
    self._partitioned_cache: dict = {}
    _jax_internal.mark_requires_devices(self.primitive)
    for platform in _PLATFORMS:
      mlir.register_lowering(
        self.primitive, functools.partial(self._lower, platform=platform), platform=platform
      )

  # ---- to be declared by each op ----
  def abstract_eval(self, *avals, **params) -> Sequence[jax.core.ShapedArray]:
    raise NotImplementedError

  def batch(self, args, dims, **params):
    raise NotImplementedError

  def sharding(self, avals_in, avals_out, **params):
    raise NotImplementedError

  def ffi_attributes(self, **params) -> dict[str, Any]:
    return {}

  def fallback(self, platform: str, **params):
    """A plain-JAX function of the operands to lower instead of the FFI call
    on `platform` (for a direction a platform has no kernel for yet), or None."""
    return None

  def workspace(self, platform: str, avals_in, **params) -> list[jax.ShapeDtypeStruct]:
    """Extra results the handler uses as scratch on `platform`; dropped after the call."""
    return []

  # ---- machinery ----
  def bind(self, *args, **params):
    return self.primitive.bind(*args, **params)

  def _abstract_eval(self, *avals, **params):
    outs = tuple(self.abstract_eval(*avals, **params))
    if self.typed_shardings:
      outs = tuple(self.sharding(avals, outs, **params).explicit_results(avals, outs))
    # Inside shard_map, results vary over the manual mesh axes their operands
    # vary over (custom_vjp checks that the backward's types match).
    axes = frozenset().union(*(_jax_internal.varying_axes(a) for a in avals))
    if not axes:
      return outs
    like = next(a for a in avals if _jax_internal.varying_axes(a))
    return tuple(_jax_internal.with_varying_axes(o, axes, like) for o in outs)

  @staticmethod
  @functools.cache
  def _jitted(primitive, items):
    params = dict(items)
    return jax.jit(lambda *args: primitive.bind(*args, **params))

  def _eager_impl(self, *args, **params):
    # Some results are infinite by design (the log-sum-exp of a query with no
    # key is -inf): jax.debug_infs/debug_nans would rerun this "de-optimized",
    # which is this function again. The user's own results are still checked.
    with jax.debug_infs(False), jax.debug_nans(False):
      return self._jitted(self.primitive, tuple(sorted(params.items())))(*args)

  def launch_split(self, platform: str, avals_in, **params):
    """Where one launch cannot take a whole call on `platform` (a CUDA grid
    dimension past 65535, say): a `LaunchSplit` saying how to cut it into
    calls that can, or None."""
    return None

  def _ffi_call(self, platform, params, *args):
    """The FFI call itself, on whole or per-shard operands, in pieces where
    `launch_split` asks for them."""
    avals = [jax.core.ShapedArray(np.shape(a), a.dtype) for a in args]
    split = self.launch_split(platform, avals, **params)
    if split is None or split.size <= split.limit:
      return self._ffi_call_once(platform, params, *args)
    pieces = []
    for start in range(0, split.size, split.limit):
      stop = min(split.size, start + split.limit)
      part = [
        a if ax is None else jax.lax.slice_in_dim(a, start, stop, axis=ax)
        for a, ax in zip(args, split.in_axes)
      ]
      pieces.append(self._ffi_call_once(platform, params, *part))
    results = []
    for i, ax in enumerate(split.out_axes):
      parts = [p[i] for p in pieces]
      if ax == "sum":  # a reduction over the split axis: summed in piece order
        total = parts[0]
        for x in parts[1:]:
          total = total + x
        results.append(total)
      else:
        results.append(jax.numpy.concatenate(parts, axis=ax))
    return tuple(results)

  def _ffi_call_once(self, platform, params, *args):
    avals = [jax.core.ShapedArray(np.shape(a), a.dtype) for a in args]
    outs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in self.abstract_eval(*avals, **params)]
    scratch = self.workspace(platform, avals, **params)
    results = jax.ffi.ffi_call(self.target, outs + scratch)(*args, **self.ffi_attributes(**params))
    return tuple(results[: len(outs)])

  def _partitioned(self, platform, params, avals_in, avals_out):
    key = (
      platform,
      tuple(sorted(params.items())),
      tuple((a.shape, str(a.dtype)) for a in avals_in),
    )
    fn = self._partitioned_cache.get(key)
    if fn is not None:
      return fn
    call = functools.partial(self._ffi_call, platform, params)
    spec = self.sharding(avals_in, avals_out, **params)
    if spec is None:  # nothing to shard (e.g. no leading dims)
      self._partitioned_cache[key] = call
      return call
    fn = custom_partitioning(call)
    fn.def_partition(
      partition=lambda mesh, arg_shapes, result_shape: spec.partition(
        call, mesh, arg_shapes, result_shape
      ),
      infer_sharding_from_operands=spec.infer_from_operands,
      sharding_rule=spec.rule(),
      need_replication_factors=spec.need_replication_factors(),
    )
    self._partitioned_cache[key] = fn
    return fn

  def _lower(self, ctx, *args, platform, **params):
    implementation = params.get("implementation")
    if implementation is not None and implementation != platform:
      raise _platform.lowering_platform_error(self.name, implementation, platform)
    composed = self.fallback(platform, **params)
    if composed is not None:
      return mlir.lower_fun(composed, multiple_results=True)(ctx, *args)
    if _single_device(ctx):
      fn = functools.partial(self._ffi_call, platform, params)
    else:
      fn = self._partitioned(platform, params, ctx.avals_in, ctx.avals_out)
    return mlir.lower_fun(lambda *a: fn(*a), multiple_results=True)(ctx, *args)


def _single_device(ctx) -> bool:
  # A jit over one device has nothing to partition (and custom_partitioning
  # needs a device assignment that such a lowering may not carry).
  num_devices = getattr(ctx.module_context.axis_context, "num_devices", None)
  return num_devices is not None and num_devices <= 1


class ComposedOp(FfiOp):
  """A primitive whose body is plain JAX (XLA ops), lowered and partitioned as
  an FfiOp is: for XLA ops whose operands XLA's partitioners gather where
  they could run per shard (an FFT over each sample of a batch-sharded
  array, say). An op declares `compute(*args, **params)` instead of an FFI
  target."""

  def compute(self, *args, **params):
    raise NotImplementedError

  def _ffi_call(self, platform, params, *args):
    params = {k: v for k, v in params.items() if k != "implementation"}
    return tuple(self.compute(*args, **params))


class LaunchSplit(NamedTuple):
  """A call cut along one axis into pieces of at most `limit`: each operand's
  axis of that dim (None: passed whole), each result's axis to concatenate
  on (or "sum": a reduction over the cut dim, added up in piece order)."""

  size: int
  limit: int
  in_axes: tuple
  out_axes: tuple


# The largest grid y/z dimension a CUDA launch takes.
CUDA_GRID_YZ_LIMIT = 65535


def shaped(shape, dtype) -> jax.core.ShapedArray:
  """An abstract value, as `abstract_eval` returns them."""
  return jax.core.ShapedArray(tuple(shape), np.dtype(dtype))


# ---- parameter gradients inside shard_map ----
# A parameter replicated across a shard_map's devices (invariant over a
# manual mesh axis) used with sharded data gets a gradient that varies over
# that axis; custom_vjp insists on the primal's type, and JAX's own autodiff
# sums such a gradient over the axis (the transpose of its implicit pvary).
# A family's custom_vjp keeps a zero-size slice of each parameter in its
# residuals (vma_token: no data, only the type) and passes each parameter's
# gradient through match_vma in its backward.


def vma_token(a):
  """A zero-size slice of `a` carrying its varying mesh axes, or None."""
  return None if a is None else jax.numpy.reshape(a, (-1,))[:0]


def extra_vma(a, b) -> frozenset:
  """The manual mesh axes `a` varies over and `b` does not."""
  return _jax_internal.varying_axes(jax.typeof(a)) - _jax_internal.varying_axes(jax.typeof(b))


def match_vma(grad, token):
  """`grad` summed over the manual mesh axes it varies over and the primal
  (whose vma_token is `token`) does not: the primal's type."""
  if grad is None or token is None:
    return grad
  extra = extra_vma(grad, token)
  return jax.lax.psum(grad, tuple(sorted(extra))) if extra else grad


def vary_like(a, like):
  """`a` made varying over the manual mesh axes `like` varies over and it
  does not (a scan's initial carry against the data it meets)."""
  extra = extra_vma(like, a)
  return jax.lax.pcast(a, tuple(sorted(extra)), to="varying") if extra else a


# ---- helpers for batching rules ----
not_mapped = None  # how batching rules mark an unbatched operand


def batch_size(args, dims) -> int:
  for a, d in zip(args, dims):
    if d is not not_mapped:
      return a.shape[d]
  raise ValueError("no batched operand")


def to_front(x, dim, size):
  """x with its batch axis first, broadcast when x was not batched."""
  if dim is not_mapped:
    return jax.lax.broadcast(x, (size,))
  return jax.numpy.moveaxis(x, dim, 0)
