"""Convolution's primitives on the FfiOp base (cpp/conv/problem.h). Python
folds the spatial dims: x is [N, in positions * C_in], the weights flat
[taps * C_in/groups * C_out], the output [N, out positions * C_out]:

  forward:  x, w, [bias], [residual]   -> y, [z]   (z: the pre-activation,
                                                    saved when the
                                                    activation needs it)
  dgrad:    dy, w, [saved]             -> dx, [d residual]
  wgrad:    x, dy, [saved]             -> dw, [d bias]

On CUDA, a primitive whose kernel is missing from the build, or whose C++
plan refuses the problem, lowers to XLA's convolutions in the operands'
dtype (reference.py, native=True).

`saved` is what the forward kept for the activation's derivative: nothing
(no activation), y (relu, relu6: their derivative is a test on y) or z.
Static params: `g`, the Geometry with batch 0 (the batch is the operands'),
and the epilogue (act, act_param, alpha, beta, has_bias, has_residual,
saved) and result dtypes.

vmap: a vmapped batch of inputs folds into N; vmapped weights (or bias)
fold into the groups, and the weight gradient always does (each vmapped
index owns its gradient): x [V, N, P * C] -> [N, P * V * C], w -> grouped
V times. Sharding: samples split with no communication; the weight and
bias gradients are sums over samples, completed by one psum.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension
from jaxdnn._primitive import FfiOp, batch_size, not_mapped, shaped, to_front
from jaxdnn._sharding import ROW, LeadingDimsSharding, param_of, row_of
from jaxdnn.activations import kinds
from jaxdnn.conv import reference

OUT = row_of("o")
WEIGHTS = param_of("w")
BIAS = param_of("b")

# FFI targets that may have no CUDA kernel in a build: all three are built
# only with the CUTLASS headers (issue 25). On CUDA a primitive without its
# target lowers to XLA's convolution (reference.py), and the house test lets
# these miss from the CUDA module's registrations.
CUDA_PENDING = frozenset({"jaxdnn_conv_fwd", "jaxdnn_conv_dgrad", "jaxdnn_conv_wgrad"})

# XLA FFI DataType codes (xla/ffi/api/c_api.h), for the plan query.
_FFI_DTYPES = {"float16": 10, "float32": 11, "float64": 12, "bfloat16": 16}


def _dtype_code(d) -> int:
  return _FFI_DTYPES.get(str(d), 0) if d else 0


def _plan(query, g, batch, act, saved, has_bias, has_residual, ints=None, **dtypes) -> int:
  """A C++ plan query (cpp/conv/ffi_cuda.cc, the launchers' own plans) for
  this problem: the geometry, the epilogue, the named dtypes' codes and any
  other integer arguments `ints`."""
  names = ("in", "out", "window", "stride", "in_dilation", "k_dilation", "pad_lo")
  dims = {f"{n}{k}": v for n, vals in zip(names, g.attributes()) for k, v in enumerate(vals)}
  return _extension.plan_query(
    query,
    batch=batch,
    in_channels=g.in_channels,
    out_channels=g.out_channels,
    groups=g.groups,
    act=act,
    saved=saved,
    has_bias=int(has_bias),
    has_residual=int(has_residual),
    **{k: _dtype_code(v) for k, v in dtypes.items()},
    **(ints or {}),
    **dims,
  )


def prefer_sm90(g, batch, gradients=False) -> bool:
  """Whether the default (algorithm=None) runs a problem the sm90 kernels
  serve on them rather than on XLA's convolution (cpp/conv/heuristics.h:
  the measured rules, which a C++ switch overrides)."""
  ints = dict(gradients=int(gradients))
  return _plan("conv_prefer_sm90", g, batch, 0, 0, False, False, ints) == 1


def forward_plan(
  g,
  batch,
  x_dtype,
  out_dtype,
  bias_dtype,
  residual_dtype,
  act,
  saved,
  has_bias,
  has_residual,
  algorithm=0,
  query="conv_fwd_workspace",
) -> int:
  """The CUDA forward's workspace bytes for this problem, or -1 where its
  kernels do not serve it; query="conv_fwd_tile_n": the CTA tile's width in
  output channels; query="conv_fwd_kernel": 1 where the 1x1 persistent GEMM
  runs it, 0 the implicit-GEMM convolution. `algorithm` is the code the call
  asked for (0: none; the 1x1 GEMM's rule reads it: cpp/conv/heuristics.h)."""
  return _plan(
    query, g, batch, act, saved, has_bias, has_residual, dict(algorithm=algorithm), dtype=x_dtype,
    out_dtype=out_dtype, bias_dtype=bias_dtype, residual_dtype=residual_dtype,
  )  # fmt: skip


def dgrad_plan(
  g, batch, *, w_dtype, dy_dtype, act, saved, has_residual, residual_dtype, **_
) -> int:
  """The CUDA data gradient's workspace bytes, or -1 where its kernel does not
  serve the problem (its refusal never depends on the batch)."""
  return _plan(
    "conv_dgrad_workspace", g, batch, act, saved, False, has_residual, dtype=w_dtype,
    dy_dtype=dy_dtype, residual_dtype=residual_dtype if has_residual else "",
  )  # fmt: skip


def wgrad_plan(
  g, batch, *, x_dtype, dy_dtype, act, saved, has_bias, bias_dtype, algorithm=0, **_
) -> int:
  """The CUDA weight gradient's workspace bytes, or -1 where its kernels do
  not serve the problem (their refusals never depend on the batch);
  `algorithm` the code the call asked for (2, direct: the depthwise kernel)."""
  return _plan(
    "conv_wgrad_workspace", g, batch, act, saved, has_bias, False, dict(algorithm=algorithm),
    dtype=x_dtype, dy_dtype=dy_dtype, bias_dtype=bias_dtype if has_bias else "",
  )  # fmt: skip


SAVE_NOTHING, SAVE_OUTPUT, SAVE_PREACT = 0, 1, 2


def positions(dims) -> int:
  return int(np.prod(dims, dtype=np.int64))


def _full(a, n, dims, channels):
  """[N, P * C] -> [N, *dims, C] (the user-facing layout)."""
  return a.reshape((n, *dims, channels))


class _ConvOp(FfiOp):
  def ffi_attributes(
    self, *, g, act, act_param, alpha, beta, saved, has_bias, has_residual, algorithm, **_
  ):
    names = ("in_dims", "out_dims", "window", "strides", "in_dilation", "k_dilation", "pad_lo")
    attrs = {k: np.asarray(v, np.int64) for k, v in zip(names, g.attributes())}
    return dict(
      in_channels=np.int64(g.in_channels),
      out_channels=np.int64(g.out_channels),
      groups=np.int64(g.groups),
      act=np.int32(act),
      act_param=np.float32(act_param),
      alpha=np.float32(alpha),
      beta=np.float32(beta),
      saved=np.int32(saved),
      has_bias=np.int32(has_bias),
      has_residual=np.int32(has_residual),
      algorithm=np.int32(algorithm),
      **attrs,
    )

  def _bind_folded_samples(self, args, dims, roles, **params):
    """vmap folded into the sample axis: the shared operands (roles "w",
    "b") are not vmapped; the others ("x", "o" rows) are, or are broadcast."""
    size = batch_size(args, dims)
    moved = []
    for a, d, r in zip(args, dims, roles):
      if r in ("x", "o"):
        a = to_front(a, d, size)
        a = a.reshape((-1,) + a.shape[2:])
      moved.append(a)
    outs = self.bind(*moved, **params)
    return [o.reshape((size, -1) + o.shape[1:]) for o in outs], [0] * len(outs)

  def _bind_folded_groups(self, args, dims, roles, out_roles, **params):
    """vmap folded into the groups: each vmapped index its own group set."""
    size = batch_size(args, dims)
    g = params["g"]
    folded = []
    for a, d, role in zip(args, dims, roles):
      a = to_front(a, d, size)
      folded.append(_fold_channels(a, role, g, size))
    g2 = dataclasses.replace(
      g,
      in_channels=g.in_channels * size,
      out_channels=g.out_channels * size,
      groups=g.groups * size,
    )
    outs = self.bind(*folded, **{**params, "g": g2})
    return [_unfold_channels(o, r, g, size) for o, r in zip(outs, out_roles)], [0] * len(outs)


def _fold_channels(a, role, g, size):
  """a [V, ...] with its V copies moved next to the channels (cf. the module
  docstring); role: "x" (C_in rows), "o" (C_out rows), "w", "b"."""
  if role == "w":
    taps = positions(g.window)
    a = a.reshape(size, taps, g.in_channels // g.groups, g.out_channels)
    return jnp.moveaxis(a, 0, 2).reshape(-1)
  if role == "b":
    return a.reshape(-1)
  c = g.in_channels if role == "x" else g.out_channels
  n = a.shape[1]
  a = a.reshape(size, n, -1, c)
  return jnp.moveaxis(a, 0, 2).reshape(n, -1)


def _unfold_channels(a, role, g, size):
  if role == "w":
    taps = positions(g.window)
    a = a.reshape(taps, g.in_channels // g.groups, size, g.out_channels)
    return jnp.moveaxis(a, 2, 0).reshape(size, -1)
  if role == "b":
    return a.reshape(size, -1)
  c = g.in_channels if role == "x" else g.out_channels
  n = a.shape[0]
  a = a.reshape(n, -1, size, c)
  return jnp.moveaxis(a, 2, 0).reshape(size, n, -1)


def _dtype(name):
  return np.dtype(jnp.dtype(name))


class ConvForward(_ConvOp):
  name = target = "jaxdnn_conv_fwd"

  def _roles(self, has_bias, has_residual):
    return ("x", "w") + (("b",) if has_bias else ()) + (("o",) if has_residual else ())

  def abstract_eval(self, x, w, *rest, g, saved, out_dtype, **_):
    y = shaped((x.shape[0], positions(g.out) * g.out_channels), _dtype(out_dtype))
    return [y] + ([y] if saved == SAVE_PREACT else [])

  def batch(self, args, dims, *, has_bias, has_residual, **params):
    params = dict(params, has_bias=has_bias, has_residual=has_residual)
    roles = self._roles(has_bias, has_residual)
    shared = [d for d, r in zip(dims, roles) if r in ("w", "b")]
    outs = ("o", "o") if params["saved"] == SAVE_PREACT else ("o",)
    if all(d is not_mapped for d in shared):
      return self._bind_folded_samples(args, dims, roles, **params)
    return self._bind_folded_groups(args, dims, roles, outs, **params)

  def sharding(self, avals_in, avals_out, *, has_bias, has_residual, **_):
    ins = (ROW, WEIGHTS) + ((BIAS,) if has_bias else ()) + ((OUT,) if has_residual else ())
    return LeadingDimsSharding(1, 0, ins, (OUT,) * len(avals_out), reduces_params=False)

  def workspace(self, platform, avals_in, *, g, **params):
    """CUDA: the bytes the sm90 forward's plan asks for (CUTLASS's own, the
    weights transposed K-major, the bias in float32; the 1x1 GEMM's: the
    bias in float32)."""
    if platform != "cuda" or not _extension.has_cuda_target(self.target):
      return []
    nbytes = _plan_of(avals_in, g, params)
    return [jax.ShapeDtypeStruct((max(nbytes, 1),), jnp.uint8)]

  def fallback(self, platform, **params):
    """XLA's convolution where the CUDA build has no kernel, or where the
    plan refuses a problem the call did not see: a vmap folded into the
    groups can take Winograd past its grid's group limit (the refusals never
    depend on the batch, so the plan is asked at batch 1)."""
    if platform != "cuda":
      return None
    if _extension.has_cuda_target(self.target) and _plan_of(None, params["g"], params) >= 0:
      return None
    return lambda *args: _forward_composed(*args, **params)


def _plan_of(avals_in, g, params):
  """The forward plan's workspace bytes (-1: refused), at avals_in's batch
  or, without avals, at batch 1."""
  return forward_plan(
    g,
    avals_in[0].shape[0] if avals_in is not None else 1,
    params["x_dtype"],
    params["out_dtype"],
    params["bias_dtype"],
    params["residual_dtype"],
    params["act"],
    params["saved"],
    params["has_bias"],
    params["has_residual"],
    params["algorithm"],
  )


def _forward_composed(
  x, w, *rest, g, act, act_param, alpha, beta, has_bias, has_residual, saved, out_dtype, **_
):
  n = x.shape[0]
  rest = list(rest)
  bias = rest.pop(0) if has_bias else None
  residual = rest.pop(0) if has_residual else None
  xs = _full(x, n, g.spatial, g.in_channels)
  ws = w.reshape((*g.window, g.in_channels // g.groups, g.out_channels))
  rs = None if residual is None else _full(residual, n, g.out, g.out_channels)
  c = reference.conv(xs, ws, g, native=True)
  z = reference.epilogue_z(c, bias, rs, alpha, beta)
  y = kinds.function(act, act_param)(z).astype(out_dtype).reshape(n, -1)
  return (y, z.astype(out_dtype).reshape(n, -1)) if saved == SAVE_PREACT else (y,)


class ConvDgrad(_ConvOp):
  name = target = "jaxdnn_conv_dgrad"

  def abstract_eval(self, dy, w, *saved, g, has_residual, x_dtype, residual_dtype, **_):
    dx = shaped((dy.shape[0], positions(g.spatial) * g.in_channels), _dtype(x_dtype))
    if not has_residual:
      return [dx]
    return [dx, shaped(dy.shape, _dtype(residual_dtype))]

  def batch(self, args, dims, **params):
    roles = ("o", "w") + (("o",) if len(args) > 2 else ())
    outs = ("x", "o") if params["has_residual"] else ("x",)
    if dims[1] is not_mapped:
      return self._bind_folded_samples(args, dims, roles, **params)
    return self._bind_folded_groups(args, dims, roles, outs, **params)

  def sharding(self, avals_in, avals_out, *, has_residual, **_):
    ins = (OUT, WEIGHTS) + ((OUT,) * (len(avals_in) - 2))
    outs = (ROW,) + ((OUT,) if has_residual else ())
    return LeadingDimsSharding(1, 0, ins, outs, reduces_params=False)

  def workspace(self, platform, avals_in, **params):
    """CUDA: the bytes the sm90 data gradient's plan asks for (the weights
    transposed K-major, dz where an activation needs it)."""
    if platform != "cuda" or not _extension.has_cuda_target(self.target):
      return []
    nbytes = dgrad_plan(params["g"], avals_in[0].shape[0], **_dgrad_dtypes(avals_in, params))
    return [jax.ShapeDtypeStruct((max(nbytes, 1),), jnp.uint8)]

  def fallback(self, platform, **params):
    """XLA's convolution where the CUDA build has no kernel, its plan
    refuses the problem (queried at batch 1: the refusal never depends on
    the batch, which the lowering's params do not carry), or the default
    heuristic prefers XLA and no algorithm was forced."""
    if platform != "cuda":
      return None
    if (
      _extension.has_cuda_target(self.target)
      and dgrad_plan(params["g"], 1, **_dgrad_dtypes(None, params)) >= 0
      and (params.get("forced") or prefer_sm90(params["g"], 1, gradients=True))
    ):
      return None
    return lambda *args: _dgrad_composed(*args, **params)


def _plan_params(params):
  return {k: v for k, v in params.items() if k != "g"}


def _dgrad_dtypes(avals_in, params):
  """The data gradient's plan arguments: dy's dtype (y's) and w's."""
  if avals_in is None:
    return dict(_plan_params(params), dy_dtype=params["out_dtype"])
  return dict(_plan_params(params), dy_dtype=avals_in[0].dtype, w_dtype=avals_in[1].dtype)


def _dgrad_composed(
  dy, w, *saved, g, act, act_param, beta, has_residual, x_dtype, residual_dtype, alpha, **_
):
  n = dy.shape[0]
  dz = reference.backprop(act, act_param, dy, saved[0] if saved else None)
  ws = w.reshape((*g.window, g.in_channels // g.groups, g.out_channels))
  gn = dataclasses.replace(g, batch=n)
  dconv = _full(dz * alpha, n, g.out, g.out_channels)
  dx = reference.data_grad(dconv, ws, gn, _dtype(x_dtype), native=True)
  dx = dx.astype(x_dtype).reshape(n, -1)
  if not has_residual:
    return (dx,)
  return dx, (dz * beta).astype(residual_dtype)


class ConvWgrad(_ConvOp):
  name = target = "jaxdnn_conv_wgrad"

  def abstract_eval(self, x, dy, *saved, g, has_bias, w_dtype, bias_dtype, **_):
    taps = positions(g.window)
    dw = shaped((taps * (g.in_channels // g.groups) * g.out_channels,), _dtype(w_dtype))
    return [dw] + ([shaped((g.out_channels,), _dtype(bias_dtype))] if has_bias else [])

  def batch(self, args, dims, **params):
    roles = ("x", "o") + (("o",) if len(args) > 2 else ())
    outs = ("w", "b") if params["has_bias"] else ("w",)
    return self._bind_folded_groups(args, dims, roles, outs, **params)

  def sharding(self, avals_in, avals_out, *, has_bias, **_):
    ins = (ROW, OUT) + ((OUT,) * (len(avals_in) - 2))
    outs = (WEIGHTS,) + ((BIAS,) if has_bias else ())
    return LeadingDimsSharding(1, 0, ins, outs, reduces_params=True)

  def workspace(self, platform, avals_in, **params):
    """CUDA: the bytes the sm90 weight gradient's plan asks for (dz where an
    activation needs it, the batch parts' float32 partials, the bias
    gradient's block sums)."""
    if platform != "cuda" or not _extension.has_cuda_target(self.target):
      return []
    nbytes = wgrad_plan(params["g"], avals_in[0].shape[0], **_wgrad_dtypes(avals_in, params))
    return [jax.ShapeDtypeStruct((max(nbytes, 1),), jnp.uint8)]

  def fallback(self, platform, **params):
    """XLA's convolution where the CUDA build has no kernel, its plan
    refuses the problem (queried at batch 1, as the data gradient's), or the
    default heuristic prefers XLA and no algorithm was forced."""
    if platform != "cuda":
      return None
    if (
      _extension.has_cuda_target(self.target)
      and wgrad_plan(params["g"], 1, **_wgrad_dtypes(None, params)) >= 0
      and (params.get("forced") or prefer_sm90(params["g"], 1, gradients=True))
    ):
      return None
    return lambda *args: _wgrad_composed(*args, **params)


def _wgrad_dtypes(avals_in, params):
  """The weight gradient's plan arguments: x's dtype and dy's (y's)."""
  if avals_in is None:
    return dict(_plan_params(params), dy_dtype=params["out_dtype"])
  return dict(_plan_params(params), x_dtype=avals_in[0].dtype, dy_dtype=avals_in[1].dtype)


def _wgrad_composed(x, dy, *saved, g, act, act_param, alpha, has_bias, w_dtype, bias_dtype, **_):
  n = x.shape[0]
  dz = reference.backprop(act, act_param, dy, saved[0] if saved else None)
  gn = dataclasses.replace(g, batch=n)
  xs = _full(x, n, g.spatial, g.in_channels)
  w_shape = (*g.window, g.in_channels // g.groups, g.out_channels)
  dconv = _full(dz * alpha, n, g.out, g.out_channels)
  dw = reference.weight_grad(xs, dconv, gn, w_shape, _dtype(w_dtype), native=True)
  dw = dw.astype(w_dtype).reshape(-1)
  if not has_bias:
    return (dw,)
  return dw, jnp.sum(dz, axis=0).reshape(-1, g.out_channels).sum(axis=0).astype(bias_dtype)


conv_forward = ConvForward()
conv_dgrad = ConvDgrad()
conv_wgrad = ConvWgrad()
