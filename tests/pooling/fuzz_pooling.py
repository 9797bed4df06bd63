"""The pooling fuzz table (tests/fuzz): invalid and edge-case arguments of
max_pool and avg_pool, and their float64 oracles (windows enumerated in
numpy)."""

import itertools
import math

import jax.numpy as jnp
import numpy as np
from fuzz_base import FuzzOp, rand

import jaxdnn
from jaxdnn.pooling import geometry


def pool_oracle(
  max_, x, window_shape, strides=None, padding="VALID", *, dilation=None, count_include_pad=True
):
  v = np.asarray(x, np.float64)
  g = geometry.make("oracle", v.shape, window_shape, strides, padding, dilation)
  fill = -np.inf if max_ else 0.0
  padded = np.pad(v, ((0, 0),) + g.pads + ((0, 0),), constant_values=fill)
  inside = np.pad(np.ones(v.shape[1:-1]), g.pads)
  out = np.full((v.shape[0],) + g.out + (v.shape[-1],), fill)
  count = np.zeros(g.out)
  for offs in itertools.product(*(range(w) for w in g.window)):
    idx = tuple(
      slice(j * d, j * d + (o - 1) * s + 1, s)
      for j, d, s, o in zip(offs, g.dilation, g.strides, g.out)
    )
    part = padded[(slice(None),) + idx + (slice(None),)]
    with np.errstate(invalid="ignore"):
      out = np.maximum(out, part) if max_ else out + part
    count = count + inside[idx]
  if not max_:
    out = out / (math.prod(g.window) if count_include_pad else count[None, ..., None])
  return np.asarray(jnp.asarray(out, jnp.float32).astype(jnp.asarray(x).dtype), np.float64)


def cases(max_):
  x = rand((2, 7, 6, 3), lo=-3.0, hi=3.0)
  base = dict(x=x, window_shape=(3, 2))
  out = []

  def add(name, arg, **changes):
    out.append((name, arg, base | changes))

  for bad, label in ((None, "none"), ("x", "str"), (3.0, "scalar")):
    add(f"x {label}", "x", x=bad)
  add("x int32", "x", x=jnp.ones((2, 7, 6, 3), jnp.int32))
  add("x bfloat16", "x", x=x.astype(jnp.bfloat16))
  add("x float16", "x", x=x.astype(jnp.float16))
  add("x float64", "x", x=x.astype(jnp.float64))
  add("x rank 2", "x", x=x[:, :, 0, 0])
  add("x 1D", "x", x=x[:, :, 0], window_shape=3)
  add("x 3D", "x", x=rand((2, 4, 5, 6, 3)), window_shape=(2, 2, 2))
  add("x nan", "x", x=x.at[0, 1, 1, 0].set(jnp.nan))
  add("x -inf", "x", x=x.at[0, 1, 1, 0].set(-jnp.inf))
  add("x window larger", "window_shape", window_shape=(8, 2))
  add("window int", "window_shape", window_shape=2)
  add("window zero", "window_shape", window_shape=(0, 2))
  add("window float", "window_shape", window_shape=(2.0, 2))
  add("window wrong length", "window_shape", window_shape=(2,))
  add("strides 2", "strides", strides=2)
  add("strides zero", "strides", strides=(0, 1))
  add("strides bool", "strides", strides=True)
  add("padding SAME", "padding", padding="SAME")
  add("padding pairs", "padding", padding=((1, 2), (0, 1)))
  add("padding negative", "padding", padding=((-1, 0), (0, 0)))
  add("padding bad str", "padding", padding="FULL")
  add("padding wrong count", "padding", padding=((1, 1),))
  add("implementation bad", "implementation", implementation="triton")
  if max_:
    add("dilation 2", "dilation", dilation=2, padding="SAME")
    add("dilation zero", "dilation", dilation=0)
  else:
    add("count_include_pad False", "count_include_pad", count_include_pad=False, padding="SAME")
    add("count_include_pad int", "count_include_pad", count_include_pad=1)
  return out


FUZZ_OPS = {
  "max_pool": FuzzOp(
    cases=lambda impl: cases(True),
    inputs=("x",),
    fn=jaxdnn.max_pool,
    oracle=lambda x, window_shape, **kw: pool_oracle(True, x, window_shape, **kw),
  ),
  "avg_pool": FuzzOp(
    cases=lambda impl: cases(False),
    inputs=("x",),
    fn=jaxdnn.avg_pool,
    oracle=lambda x, window_shape, **kw: pool_oracle(False, x, window_shape, **kw),
  ),
}
