"""Conformance checks that every jaxdnn op gets for free.

A family declares each op once, as an `OpSpec` (the function, an input
generator, tolerances by dtype, the custom-call targets, how to shard it),
and subclasses `ConformanceSuite`:

    from conformance import ConformanceSuite, OpSpec, Sharded

    LAYER_NORM = OpSpec(name="layer_norm", fn=lambda x, s, b, implementation=None:
                        jaxdnn.layer_norm(x, s, b, implementation=implementation), ...)

    class TestLayerNorm(ConformanceSuite):
      spec = LAYER_NORM

(tests/norms/test_conformance.py and tests/attention/test_conformance.py
are complete examples). pytest then generates, for that op, one test per check below (parametrized
over implementations, dtypes and shapes where it matters):

  eager==jit       the eager call equals the jitted one;
  impl==oracle     each implementation (None, "cpu" on CPU machines, "cuda"
                   on GPU ones) matches implementation="xla" on every dtype,
                   and the default one over every shape;
  grad==oracle     jit(grad) of a random projection of the outputs matches
                   the oracle's, same sweep;
  check_grads      jax.test_util.check_grads, float32, order 1, reverse mode;
  vmap(0), vmap(1) vmap over a leading and over a non-leading axis, of every
                   input, and of the data inputs only (parameters shared);
  vmap(grad)       per-example gradients, parameters shared;
  checkpoint       grad through jax.checkpoint, still the kernel's targets;
  HLO fwd / bwd    the compiled HLO holds the op's custom call (forward; and
                   the backward one under grad), the oracle's holds none;
  sharded fwd/bwd  inputs sharded with NamedSharding over 4 CPU devices: the
                   oracle's answer, the inputs' sharding kept, no all-gather,
                   all-to-all or collective-permute in the compiled HLO (no
                   collective at all in the forward; in the backward an
                   all-reduce exactly when the spec says parameters sum);
  impl errors      an unknown implementation= is a ValueError naming it, and
                   a kernel for the wrong platform is refused.

Inputs are fresh random draws (never zeros), seeded by the test's id so a
failure reproduces. Every array reaches jit as an argument, never closed over
(a constant would be folded). The composability table (op x check ->
pass/FAIL/skip) that conftest.py prints at the end of a run is built from
these tests' outcomes (`record` and `table` below).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import re
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import on_gpu
from jax.sharding import NamedSharding
from jax.test_util import check_grads

DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
# Collectives that move data between shards: a sharded row-wise op needs none.
MOVES = ("all-gather", "all-to-all", "collective-permute")


@dataclasses.dataclass(frozen=True)
class Sharded:
  """How to shard an op's inputs over a device mesh (see the sharded checks)."""

  mesh_shape: tuple
  axis_names: tuple
  shape: Any  # the `shape` given to make_inputs
  in_specs: tuple  # a PartitionSpec per input (P() = replicated)
  out_specs: tuple  # the PartitionSpec each output leaf must keep
  bwd_all_reduce: bool  # whether the backward sums over shards (shared parameters)
  fwd_all_reduce: bool = False  # whether the forward sums over shards (batch statistics)


@dataclasses.dataclass(frozen=True)
class OpSpec:
  """One op as the conformance checks see it.

  fn(*inputs, implementation=None) -> an array or a tuple of arrays.
  make_inputs(rng, shape, dtype) -> the inputs, a tuple of arrays; `rng` is a
    numpy Generator, `shape` one of `shapes` (anything: the family reads it).
  tol(dtype) -> rtol for outputs against the oracle (atol = rtol * max(1,
    max |oracle|)): a number, or a tuple with one per output leaf; 0 = exact.
  grad_tol(dtype) -> the same for gradients.
  """

  name: str
  fn: Callable
  make_inputs: Callable
  shapes: Sequence
  tol: Callable
  grad_tol: Callable
  fwd_target: str
  bwd_target: str
  small_shape: Any  # vmap, checkpoint, HLO and error checks
  check_grads_shape: Any  # numerical differences: keep it tiny
  grad_shapes: Sequence = ()  # grad==oracle sweep; default: (small_shape,)
  dtypes: tuple = DTYPES
  diff_argnums: tuple | None = None  # None: every floating input
  data_argnums: tuple = (0,)  # batched when the others are shared under vmap
  check_grads_tol: float = 2e-2
  sharded: Sharded | None = None
  # dtypes the CUDA kernel serves; other dtypes fall back to XLA on a GPU.
  gpu_dtypes: tuple = DTYPES
  # The oracle compiles with less optimisation: the same arithmetic in about
  # two thirds of the time (compiling dominates these small cases).
  oracle_compiler_options: dict | None = dataclasses.field(
    default_factory=lambda: {"xla_backend_optimization_level": 0}
  )
  # The oracle runs on float32 copies of 16-bit inputs, its results cast back:
  # for ops whose composition in 16 bits rounds each step (the kernels round
  # once), so the oracle is the better answer rather than a second rounding.
  oracle_in_float32: bool = False
  # dtype -> bound for eager==jit (None: exact). For ops with XLA's own dots
  # around the kernel, which cuBLAS may run with another algorithm once fused
  # under jit.
  eager_jit_tol: Callable | None = None


# ---------------------------------------------------------------- helpers


def output_loss(outputs, weights):
  """The checks' loss of an op's output leaves: sum of sin(y) * weight over
  the finite entries, in float32."""
  total = 0.0
  for y, w in zip(outputs, weights):
    y = y.astype(jnp.float32)
    total += jnp.sum(jnp.where(jnp.isfinite(y), jnp.sin(y) * w, 0.0))
  return total


def normal(rng, shape, dtype=jnp.float32, scale=1.0, offset=0.0):
  """Fresh standard-normal draws * scale + offset, as a jax array of `dtype`."""
  x = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale) + np.float32(offset)
  return jnp.asarray(x.astype(jnp.dtype(dtype)))


def assert_close(a, b, rtol, atol=None, err_msg=""):
  """|a - b| <= atol + rtol |b|, atol defaulting to rtol * max(1, max |finite b|);
  infinities must sit at the same places; rtol 0 asks for equality."""
  a = np.asarray(jnp.asarray(a, jnp.float32))
  b = np.asarray(jnp.asarray(b, jnp.float32))
  assert a.shape == b.shape, (a.shape, b.shape)
  if rtol == 0:
    np.testing.assert_array_equal(a, b, err_msg=err_msg)
    return
  finite = b[np.isfinite(b)]
  scale = max(1.0, float(np.max(np.abs(finite))) if finite.size else 1.0)
  np.testing.assert_allclose(
    a, b, rtol=rtol, atol=(atol if atol is not None else rtol * scale), err_msg=err_msg
  )


def assert_trees_close(got, want, tol):
  """Same structure, shapes and dtypes; values within `tol` (one per leaf or shared)."""
  got_leaves, got_tree = jax.tree.flatten(got)
  want_leaves, want_tree = jax.tree.flatten(want)
  assert got_tree == want_tree, (got_tree, want_tree)
  tols = tol if isinstance(tol, (tuple, list)) else (tol,) * len(want_leaves)
  for i, (g, w, t) in enumerate(zip(got_leaves, want_leaves, tols)):
    assert g.shape == w.shape and g.dtype == w.dtype, (i, g.shape, g.dtype, w.shape, w.dtype)
    assert_close(g, w, t, err_msg=f"output leaf {i}")


def _instructions(hlo_text):
  """(opcode, line) for each instruction of an HLO module's text."""
  for line in hlo_text.splitlines():
    lhs, sep, rhs = line.partition(" = ")
    if not sep:
      continue
    m = re.search(r"(?:^|[\s)])([a-z][a-z0-9-]*)\(", rhs)
    if m:
      yield m.group(1), rhs


def custom_call_targets(hlo_text):
  """The targets of the custom-call instructions (not of text elsewhere:
  metadata carries source paths that say "jaxdnn" too)."""
  out = set()
  for op, rhs in _instructions(hlo_text):
    if op == "custom-call":
      m = re.search(r'custom_call_target="([^"]+)"', rhs)
      if m:
        out.add(m.group(1))
  return out


def collectives(hlo_text):
  """The collective opcodes in an HLO module ("all-gather-start" -> "all-gather")."""
  kinds = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter")
  return {k for op, _ in _instructions(hlo_text) for k in kinds if op in (k, k + "-start")}


def compiled_text(f, *args):
  return jax.jit(f).lower(*args).compile().as_text()


def implementations():
  """[(implementation, marks)]: None (the kernel for the platform) and each
  explicit kernel; on a GPU the arrays live on the GPU, so "cpu" skips there."""
  cpu_marks = [pytest.mark.skipif(on_gpu(), reason="runs the CPU kernel on CPU arrays")]
  return [(None, []), ("cpu", cpu_marks)] + ([("cuda", [])] if on_gpu() else [])


def _dtype_name(d):
  return jnp.dtype(d).name


# ---------------------------------------------------------------- the checks


class ConformanceSuite:
  """Base class of a family's conformance tests: set `spec` to an OpSpec."""

  spec: OpSpec

  def pytest_generate_tests(self, metafunc):
    spec = self.spec
    names = metafunc.fixturenames
    sweep = None
    if "shape" in names:
      sweep = ("shape", spec.shapes)
    elif "grad_shape" in names:
      sweep = ("grad_shape", spec.grad_shapes or (spec.small_shape,))
    if sweep and "impl" in names:
      # Every implementation on every dtype at the first shape; the default
      # implementation over the whole shape sweep.
      name, shapes = sweep
      cases = [(impl, marks, shapes[0]) for impl, marks in implementations()]
      cases += [(None, [], s) for s in shapes[1:]]
      metafunc.parametrize(
        ("impl", name), [pytest.param(i, s, marks=m, id=f"{i}-{s}") for i, m, s in cases]
      )
    elif "impl" in names:
      metafunc.parametrize(
        "impl", [pytest.param(i, marks=m, id=str(i)) for i, m in implementations()]
      )
    if "dtype" in names:
      metafunc.parametrize("dtype", spec.dtypes, ids=_dtype_name)

  @pytest.fixture
  def rng(self, request):
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))

  # ---- plumbing

  def call(self, impl):
    return functools.partial(self.spec.fn, implementation=impl)

  def jit(self, f, impl):
    """jax.jit; the oracle with the spec's (faster-compiling) options."""
    opts = self.spec.oracle_compiler_options if impl == "xla" else None
    return jax.jit(f, compiler_options=opts)

  def kernel_serves(self, dtype):
    return not on_gpu() or dtype in self.spec.gpu_dtypes

  def skip_unless_served(self, impl, dtype):
    if impl == "cuda" and dtype not in self.spec.gpu_dtypes:
      pytest.skip(f"the CUDA kernel does not take {_dtype_name(dtype)}")

  def backward_target_expected(self):
    """On a GPU the CUDA backward may still be the composed JAX one (no target)."""
    if not on_gpu():
      return True
    from jaxdnn import _extension

    return _extension.has_cuda_target(self.spec.bwd_target)

  def transform_dtype(self):
    """float32, or on a GPU the first dtype its kernel serves."""
    if self.kernel_serves(jnp.float32):
      return jnp.float32
    return self.spec.gpu_dtypes[0]

  def diff_argnums(self, args):
    if self.spec.diff_argnums is not None:
      return self.spec.diff_argnums
    return tuple(i for i, a in enumerate(args) if jnp.issubdtype(a.dtype, jnp.floating))

  @staticmethod
  def of_diff_args(f, args, argnums):
    """f as a function of args[argnums] only, the other args fixed."""

    def g(*diff):
      full = list(args)
      for i, x in zip(argnums, diff):
        full[i] = x
      return f(*full)

    return g

  def oracle_args(self, args):
    """The oracle's inputs: float32 copies of 16-bit floats where the spec says so."""
    if not self.spec.oracle_in_float32:
      return args
    wide = lambda a: a.astype(jnp.float32) if a.dtype in (jnp.bfloat16, jnp.float16) else a
    return tuple(wide(a) for a in args)

  def oracle_vjp(self, impl, args, weights):
    """The float32 oracle's gradients at the cotangents the kernel's backward
    got (cos(y) w at the kernel's own 16-bit outputs y, rounded as they
    arrive): so a one-ulp difference in y, which cos(y) magnifies where y is
    large, is not charged to the backward."""
    ys = jax.tree.leaves(self.jit(self.call(impl), impl)(*args))
    cts = jax.grad(output_loss)(ys, weights)  # in the outputs' dtypes, as the kernel gets them
    wide, argnums = list(self.oracle_args(args)), self.diff_argnums(args)

    def oracle(*diff):
      full = list(wide)
      for i, a in zip(argnums, diff):
        full[i] = a
      return jax.tree.leaves(self.call("xla")(*full))

    outs, vjp = jax.vjp(oracle, *[wide[i] for i in argnums])
    return vjp([c.astype(o.dtype) for c, o in zip(cts, outs)])

  def oracle_cast(self, want, got):
    """The oracle's results in the dtypes of the kernel's."""
    if not self.spec.oracle_in_float32:
      return want
    return jax.tree.map(lambda w, g: w.astype(g.dtype), want, got)

  def weights(self, rng, args):
    """A float32 random weight per output leaf (the projection the losses take)."""
    outs = jax.eval_shape(self.call(None), *args)
    return [normal(rng, o.shape) for o in jax.tree.leaves(outs)]

  def loss(self, impl, remat=False):
    """loss(*inputs, weights): sum of sin(output) * weight over the finite entries."""
    f = self.call(impl)
    if remat:
      f = jax.checkpoint(f)

    def loss(*args):
      *inputs, weights = args
      return output_loss(jax.tree.leaves(f(*inputs)), weights)

    return loss

  def grads(self, impl, args, weights, remat=False):
    g = jax.grad(self.loss(impl, remat), argnums=self.diff_argnums(args))
    return self.jit(g, impl)(*args, weights)

  def stacked(self, rng, axis, shared, n=3):
    """(inputs with a new axis of n at `axis`, in_axes): every input batched,
    or (shared) only the spec's data inputs."""
    sets = [
      self.spec.make_inputs(rng, self.spec.small_shape, self.transform_dtype()) for _ in range(n)
    ]
    args, in_axes = [], []
    for i in range(len(sets[0])):
      if shared and i not in self.spec.data_argnums:
        args.append(sets[0][i])
        in_axes.append(None)
      else:
        args.append(jnp.stack([s[i] for s in sets], axis))
        in_axes.append(axis)
    return args, tuple(in_axes)

  # ---- the checks (each test's name maps to a table column in CHECKS)

  def test_eager_matches_jit(self, rng, dtype):
    # Exactly: the same kernel runs (an XLA fallback may fuse differently).
    if not self.kernel_serves(dtype):
      pytest.skip(f"no kernel for {_dtype_name(dtype)} on this platform")
    args = self.spec.make_inputs(rng, self.spec.small_shape, dtype)
    eager = self.call(None)(*args)
    tol = self.spec.eager_jit_tol(dtype) if self.spec.eager_jit_tol else 0
    assert_trees_close(eager, jax.jit(self.call(None))(*args), tol)

  def test_matches_oracle(self, rng, impl, dtype, shape):
    self.skip_unless_served(impl, dtype)
    args = self.spec.make_inputs(rng, shape, dtype)
    got = self.jit(self.call(impl), impl)(*args)
    want = self.oracle_cast(self.jit(self.call("xla"), "xla")(*self.oracle_args(args)), got)
    assert_trees_close(got, want, self.spec.tol(dtype))

  def test_grad_matches_oracle(self, rng, impl, dtype, grad_shape):
    self.skip_unless_served(impl, dtype)
    args = self.spec.make_inputs(rng, grad_shape, dtype)
    w = self.weights(rng, args)
    got = self.grads(impl, args, w)
    if self.spec.oracle_in_float32:
      want = self.oracle_cast(self.oracle_vjp(impl, args, w), got)
    else:
      want = self.grads("xla", args, w)
    assert_trees_close(got, want, self.spec.grad_tol(dtype))

  def test_check_grads(self, rng):
    args = self.spec.make_inputs(rng, self.spec.check_grads_shape, jnp.float32)
    argnums = self.diff_argnums(args)
    f = self.of_diff_args(self.call(None), args, argnums)
    # eps 1e-3: float32 central differences at the default 1e-4 carry a few
    # percent of roundoff now and then.
    tol = self.spec.check_grads_tol
    check_grads(
      f, tuple(args[i] for i in argnums), order=1, modes=["rev"], atol=tol, rtol=tol, eps=1e-3
    )

  def _check_vmap(self, rng, axis, shared):
    args, in_axes = self.stacked(rng, axis, shared)
    f = lambda impl: self.jit(jax.vmap(self.call(impl), in_axes, out_axes=axis), impl)
    assert_trees_close(f(None)(*args), f("xla")(*args), self.spec.tol(self.transform_dtype()))

  @pytest.mark.parametrize("shared", [False, True], ids=["all", "data_only"])
  def test_vmap_leading(self, rng, shared):
    self._check_vmap(rng, 0, shared)

  @pytest.mark.parametrize("shared", [False, True], ids=["all", "data_only"])
  def test_vmap_non_leading(self, rng, shared):
    self._check_vmap(rng, 1, shared)

  def test_vmap_of_grad(self, rng):
    args, in_axes = self.stacked(rng, 0, shared=True)
    one = [a if ax is None else a[0] for a, ax in zip(args, in_axes)]
    w = [normal(rng, (3,) + x.shape) for x in self.weights(rng, one)]
    argnums = self.diff_argnums(one)

    def per_example(impl):
      g = jax.grad(self.loss(impl), argnums=argnums)
      return self.jit(jax.vmap(g, in_axes + (0,)), impl)

    got, want = per_example(None)(*args, w), per_example("xla")(*args, w)
    assert_trees_close(got, want, self.spec.grad_tol(self.transform_dtype()))

  def test_checkpoint(self, rng):
    dtype = self.transform_dtype()
    args = self.spec.make_inputs(rng, self.spec.small_shape, dtype)
    w = self.weights(rng, args)
    got, want = self.grads(None, args, w, remat=True), self.grads("xla", args, w, remat=True)
    assert_trees_close(got, want, self.spec.grad_tol(dtype))
    g = jax.grad(self.loss(None, remat=True), argnums=self.diff_argnums(args))
    targets = custom_call_targets(compiled_text(g, *args, w))
    assert self.spec.fwd_target in targets, targets
    assert (self.spec.bwd_target in targets) == self.backward_target_expected(), targets

  def _hlo_case(self, rng, impl):
    dtype = self.transform_dtype()
    if impl == "cuda":
      self.skip_unless_served(impl, dtype)
    return self.spec.make_inputs(rng, self.spec.small_shape, dtype)

  def test_hlo_forward_target(self, rng, impl):
    args = self._hlo_case(rng, impl)
    targets = custom_call_targets(compiled_text(self.call(impl), *args))
    assert self.spec.fwd_target in targets, targets
    oracle = custom_call_targets(compiled_text(self.call("xla"), *args))
    assert not any(t.startswith("jaxdnn") for t in oracle), oracle

  def test_hlo_backward_target(self, rng, impl):
    args = self._hlo_case(rng, impl)
    w = self.weights(rng, args)
    if not self.backward_target_expected():
      pytest.skip(f"this build has no {self.spec.bwd_target} kernel")
    g = jax.grad(self.loss(impl), argnums=self.diff_argnums(args))
    targets = custom_call_targets(compiled_text(g, *args, w))
    assert self.spec.bwd_target in targets, targets

  def _sharded_case(self, rng):
    sh = self.spec.sharded
    if sh is None:
      pytest.skip(f"{self.spec.name} declares no sharding")
    if len(jax.devices()) < int(np.prod(sh.mesh_shape)):
      pytest.skip(f"needs {int(np.prod(sh.mesh_shape))} devices")
    mesh = jax.make_mesh(sh.mesh_shape, sh.axis_names)
    put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))
    args = self.spec.make_inputs(rng, sh.shape, self.transform_dtype())
    return mesh, put, args, [put(a, s) for a, s in zip(args, sh.in_specs)]

  def test_sharded_forward(self, rng):
    mesh, _, args, sharded = self._sharded_case(rng)
    fwd = jax.jit(self.call(None))
    got = fwd(*sharded)
    want = self.jit(self.call("xla"), "xla")(*args)
    assert_trees_close(got, want, self.spec.tol(self.transform_dtype()))
    for i, (y, spec) in enumerate(zip(jax.tree.leaves(got), self.spec.sharded.out_specs)):
      assert y.sharding.is_equivalent_to(NamedSharding(mesh, spec), y.ndim), (i, y.sharding)
    text = fwd.lower(*sharded).compile().as_text()
    assert self.spec.fwd_target in custom_call_targets(text)
    moved = collectives(text)
    # Rows never meet in the forward (but where the op reduces over them,
    # as batch statistics do, in all-reduces only).
    assert not moved & set(MOVES), moved
    assert ("all-reduce" in moved) == self.spec.sharded.fwd_all_reduce, moved

  def test_sharded_backward(self, rng):
    mesh, put, args, sharded = self._sharded_case(rng)
    argnums = self.diff_argnums(args)
    outs = jax.tree.leaves(jax.eval_shape(self.call(None), *args))
    cts = [normal(rng, o.shape, o.dtype) for o in outs]
    cts_sharded = [put(c, s) for c, s in zip(cts, self.spec.sharded.out_specs)]

    # A cotangent for the outputs rather than a scalar loss: no reduction of
    # our own, so a collective in the compiled backward is the op's.
    def vjp(impl):
      def g(*args):
        *inputs, cts = args
        f = self.of_diff_args(self.call(impl), inputs, argnums)
        out, pullback = jax.vjp(f, *(inputs[i] for i in argnums))
        return pullback(jax.tree.unflatten(jax.tree.structure(out), cts))

      return g

    g = jax.jit(vjp(None))
    got = g(*sharded, cts_sharded)
    want = self.jit(vjp("xla"), "xla")(*args, cts)
    assert_trees_close(got, want, self.spec.grad_tol(self.transform_dtype()))
    for i, d in zip(argnums, got):  # each gradient sharded like its input
      assert d.sharding.is_equivalent_to(sharded[i].sharding, d.ndim), (i, d.sharding)
    text = g.lower(*sharded, cts_sharded).compile().as_text()
    assert (self.spec.bwd_target in custom_call_targets(text)) == self.backward_target_expected()
    moved = collectives(text)
    assert not moved & set(MOVES), moved
    assert ("all-reduce" in moved) == self.spec.sharded.bwd_all_reduce, moved

  def test_implementation_errors(self, rng):
    args = self.spec.make_inputs(rng, self.spec.small_shape, self.transform_dtype())
    for bad in ("triton", "CPU", ""):
      with pytest.raises(ValueError, match="implementation"):
        self.call(bad)(*args)
      with pytest.raises(ValueError, match="implementation"):
        jax.jit(self.call(bad))(*args)
    # A kernel for another platform is refused, never silently swapped.
    other, match = (
      ("cpu", "cannot run on platform")
      if on_gpu()
      else ("cuda", r"implementation='cuda'|cannot run on platform 'cpu'")
    )
    with pytest.raises(ValueError, match=match):
      jax.jit(self.call(other))(*args)


# ---------------------------------------------------------------- the table

# test name -> column of the composability table, in order.
CHECKS = {
  "test_eager_matches_jit": "eager==jit",
  "test_matches_oracle": "impl==oracle",
  "test_grad_matches_oracle": "grad==oracle",
  "test_check_grads": "check_grads",
  "test_vmap_leading": "vmap(0)",
  "test_vmap_non_leading": "vmap(1)",
  "test_vmap_of_grad": "vmap(grad)",
  "test_checkpoint": "checkpoint",
  "test_hlo_forward_target": "HLO fwd",
  "test_hlo_backward_target": "HLO bwd",
  "test_sharded_forward": "sharded fwd",
  "test_sharded_backward": "sharded bwd",
  "test_implementation_errors": "impl errors",
}
_KEY = "conformance"
_outcomes = collections.defaultdict(collections.Counter)  # (op, column) -> outcome counts
_ops = []


def tag(items):
  """At collection: label each conformance test with its (op, column)."""
  for item in items:
    cls = getattr(item, "cls", None)
    if cls is None or not issubclass(cls, ConformanceSuite):
      continue
    column = CHECKS.get(getattr(item, "originalname", item.name))
    if column is not None:
      item.user_properties.append((_KEY, (cls.spec.name, column)))


def record(report):
  """Each conformance test's outcome, from its report (works under xdist too)."""
  label = dict(report.user_properties).get(_KEY)
  if label is None:
    return
  if report.when == "call" or (report.when == "setup" and not report.passed):
    op, column = label
    if op not in _ops:
      _ops.append(op)
    _outcomes[tuple(label)][report.outcome] += 1


def _cell(counts):
  passed, failed, skipped = (counts.get(k, 0) for k in ("passed", "failed", "skipped"))
  if not counts:
    return "-"
  if failed:
    return f"FAIL {failed}/{passed + failed}"
  if not passed:
    return "skip"
  return "pass" + (f" ({skipped} skip)" if skipped else "")


def table():
  """The composability table as markdown, or None when no conformance test ran."""
  if not _outcomes:
    return None
  columns = [c for c in CHECKS.values() if any(k[1] == c for k in _outcomes)]
  rows = [[op] + [_cell(_outcomes.get((op, c), {})) for c in columns] for op in _ops]
  head = ["op"] + columns
  widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
  line = lambda r: "| " + " | ".join(x.ljust(w) for x, w in zip(r, widths)) + " |"
  return "\n".join(
    [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows]
  )


def dump():
  """This process's outcomes as JSON-able data (a shard of a split run)."""
  return dict(ops=list(_ops), outcomes=[[op, col, dict(c)] for (op, col), c in _outcomes.items()])


def load(data):
  """Adds a shard's dump() to this process's outcomes (merging split runs)."""
  for op in data["ops"]:
    if op not in _ops:
      _ops.append(op)
  for op, col, counts in data["outcomes"]:
    _outcomes[(op, col)].update(counts)
