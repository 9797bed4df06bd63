"""The convolution fuzz table (tests/fuzz): invalid and edge-case arguments
of conv and conv_transpose, and their float64 oracles (the taps enumerated
in numpy over the input-dilated, padded array)."""

import itertools
import math

import jax.numpy as jnp
import numpy as np
from fuzz_base import FuzzOp, rand

import jaxdnn
from jaxdnn.conv import geometry

_ACTS = {
  None: lambda z: z,
  "relu": lambda z: np.maximum(z, 0.0),
  "silu": lambda z: z / (1.0 + np.exp(-z)),
  "gelu": lambda z: 0.5 * z * (1.0 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3))),
}


def conv_oracle_g(x, w, bias, g, pad_mode, activation=None, residual=None, alpha=1.0, beta=1.0):
  v = np.asarray(x, np.float64)
  k = np.asarray(w, np.float64)
  if pad_mode is not None:
    mode, wrap = pad_mode
    v = np.pad(v, ((0, 0), *wrap, (0, 0)), mode=mode)
  n = g.ndim
  # Input dilation, then the (possibly negative) padding.
  shape = (
    v.shape[0],
    *((s - 1) * d + 1 if s else 0 for s, d in zip(v.shape[1:-1], g.input_dilation)),
  )
  dil = np.zeros(shape + (v.shape[-1],))
  dil[(slice(None), *(slice(None, None, d) for d in g.input_dilation), slice(None))] = v
  pos = tuple((max(lo, 0), max(hi, 0)) for lo, hi in g.pads)
  dil = np.pad(dil, ((0, 0), *pos, (0, 0)))
  crop = tuple(
    slice(-min(lo, 0), dil.shape[1 + i] + min(hi, 0)) for i, (lo, hi) in enumerate(g.pads)
  )
  dil = dil[(slice(None), *crop, slice(None))]
  groups, cin_g, cout = g.groups, k.shape[-2], k.shape[-1]
  out = np.zeros((v.shape[0], *g.out, cout))
  for taps in itertools.product(*(range(w_) for w_ in k.shape[:n])):
    idx = tuple(
      slice(j * d, j * d + (o - 1) * s + 1, s)
      for j, d, s, o in zip(taps, g.kernel_dilation, g.strides, g.out)
    )
    part = dil[(slice(None), *idx, slice(None))]
    part = part.reshape(part.shape[:-1] + (groups, cin_g))
    kk = k[taps].reshape(cin_g, groups, cout // groups)
    out += np.einsum("...gc,cgo->...go", part, kk).reshape(out.shape)
  z = alpha * out
  if bias is not None:
    z = z + np.asarray(bias, np.float64)
  if residual is not None:
    z = z + beta * np.asarray(residual, np.float64)
  y = _ACTS[activation](z)
  return np.asarray(jnp.asarray(y, jnp.float32).astype(jnp.asarray(x).dtype), np.float64)


def conv_oracle(
  x,
  w,
  bias=None,
  *,
  strides=1,
  padding="SAME",
  input_dilation=1,
  kernel_dilation=1,
  feature_group_count=1,
  **epilogue,
):
  g, pad_mode = geometry.make(
    "oracle", x.shape, w.shape, strides, padding, input_dilation, kernel_dilation,
    feature_group_count,
  )  # fmt: skip
  epilogue.pop("algorithm", None)
  return conv_oracle_g(x, w, bias, g, pad_mode, **epilogue)


def conv_transpose_oracle(
  x, w, bias=None, *, strides=1, padding="SAME", kernel_dilation=1, **epilogue
):
  n = x.ndim - 2
  s = geometry.ints("oracle", "strides", strides, n)
  kd = geometry.ints("oracle", "kernel_dilation", kernel_dilation, n)
  pads = geometry.transpose_pads("oracle", padding, w.shape[:n], s, kd)
  g, _ = geometry.make("oracle", x.shape, w.shape, 1, pads, s, kd, 1)
  epilogue.pop("algorithm", None)
  return conv_oracle_g(x, w, bias, g, None, **epilogue)


def cases(transpose):
  x = rand((2, 7, 6, 4), lo=-2.0, hi=2.0)
  w = rand((3, 3, 4, 5), lo=-0.5, hi=0.5)
  b = rand((5,))
  base = dict(x=x, w=w)
  out = []

  def add(name, arg, **changes):
    out.append((name, arg, base | changes))

  for bad, label in ((None, "none"), ("x", "str"), (3.0, "scalar")):
    add(f"x {label}", "x", x=bad)
  add("x int32", "x", x=jnp.ones((2, 7, 6, 4), jnp.int32))
  add("x bfloat16", "x", x=x.astype(jnp.bfloat16), w=w.astype(jnp.bfloat16))
  add("x float16", "x", x=x.astype(jnp.float16), w=w.astype(jnp.float16))
  add("x float64", "x", x=x.astype(jnp.float64), w=w.astype(jnp.float64))
  add("w dtype differs", "w", w=w.astype(jnp.bfloat16))
  add("x rank 2", "x", x=x[:, :, 0, 0])
  add("w rank differs", "w", w=w[0])
  add("x nan", "x", x=x.at[0, 1, 1, 0].set(jnp.nan))
  add("x inf", "x", x=x.at[0, 1, 1, 0].set(jnp.inf))
  add("x 1D", "x", x=x[:, :, 0], w=w[0])
  add("x 3D", "x", x=rand((1, 4, 5, 6, 4)), w=rand((2, 3, 2, 4, 5), lo=-0.5, hi=0.5))
  add("bias", "bias", bias=b)
  add("bias wrong shape", "bias", bias=rand((4,)))
  add("strides 2", "strides", strides=2)
  add("strides zero", "strides", strides=(0, 1))
  add("strides bool", "strides", strides=True)
  add("padding VALID", "padding", padding="VALID")
  add("padding pairs", "padding", padding=((1, 2), (0, 1)))
  add("padding bad str", "padding", padding="FULL")
  add("padding wrong count", "padding", padding=((1, 1),))
  add("kernel_dilation 2", "kernel_dilation", kernel_dilation=2)
  add("kernel_dilation zero", "kernel_dilation", kernel_dilation=0)
  add("activation relu", "activation", activation="relu", bias=b)
  add("activation gelu", "activation", activation="gelu")
  add("activation bad", "activation", activation="swish")
  add("alpha inf", "alpha", alpha=float("inf"))
  add("algorithm bad", "algorithm", algorithm="fastest")
  add("algorithm winograd", "algorithm", algorithm="winograd")
  add("implementation bad", "implementation", implementation="triton")
  if not transpose:
    add("padding negative", "padding", padding=((-1, 0), (0, 1)))
    add("padding CIRCULAR", "padding", padding="CIRCULAR")
    add("padding REFLECT", "padding", padding="REFLECT")
    add("padding CAUSAL 2D", "padding", padding="CAUSAL")
    add("padding CAUSAL 1D", "padding", padding="CAUSAL", x=x[:, :, 0], w=w[0])
    add("w larger than input", "w", w=rand((8, 3, 4, 5)), padding="VALID")
    add("input_dilation 2", "input_dilation", input_dilation=2, padding=((1, 1), (1, 1)))
    add("input_dilation with SAME", "input_dilation", input_dilation=2)
    add("groups 2", "feature_group_count", feature_group_count=2, w=rand((3, 3, 2, 6)))
    add("groups depthwise", "feature_group_count", feature_group_count=4, w=rand((3, 3, 1, 8)))
    add("groups mismatch", "feature_group_count", feature_group_count=3)
    add("groups zero", "feature_group_count", feature_group_count=0)
    add(
      "residual, alpha, beta",
      "residual",
      residual=rand((2, 7, 6, 5)),
      alpha=0.5,
      beta=-2.0,
      activation="silu",
    )
    add("residual wrong shape", "residual", residual=rand((2, 7, 6, 4)))
  else:
    add("padding CIRCULAR", "padding", padding="CIRCULAR")
  return out


_ALIASES = {"w": "kernel", "feature_group_count": "channels", "input_dilation": "padding"}

FUZZ_OPS = {
  "conv": FuzzOp(
    cases=lambda impl: cases(False),
    inputs=("x", "w"),
    fn=jaxdnn.conv,
    oracle=conv_oracle,
    aliases=_ALIASES,
  ),
  "conv_transpose": FuzzOp(
    cases=lambda impl: cases(True),
    inputs=("x", "w"),
    fn=jaxdnn.conv_transpose,
    oracle=conv_transpose_oracle,
    aliases=_ALIASES,
  ),
}
