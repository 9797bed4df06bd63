"""Rows of every width class the CUDA kernels split differently, against the
"xla" oracle, forward and backward, plain and with `where`: whole 16-byte
vectors held by one CTA (several rows to a CTA, one row to a CTA), split
over 2 to 8 CTAs of a cluster, at 8 vectors a thread, and rows too long for
a cluster or not whole vectors (the two-pass kernels). On CPU the same
widths run the CPU kernels. NaN and inf placed in a later CTA's share of a
split row spread as in the reference. Cross-entropy rows likewise: the
vector kernels' chunks (the label in any of them), options, NaN and inf."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdnn

# bfloat16 entries per 16-byte vector: 8; float32: 4. Widths (in entries)
# for bfloat16: one vector, a CTA's share of up to 2048 vectors, the first
# width split over 2 CTAs, over 8, 8 vectors a thread, the longest a cluster
# holds, one vector more (two-pass), and a width that is not whole vectors.
WIDTHS = {
  jnp.bfloat16: [8, 1000, 16384, 16392, 65544, 131080, 262144, 262152, 4097],
  jnp.float32: [4, 1000, 8192, 8196, 32772, 65540, 131072, 131076, 4097],
}
CASES = [(d, w) for d, ws in WIDTHS.items() for w in ws]
IDS = [f"{jnp.dtype(d).name}-{w}" for d, w in CASES]
TOL = {jnp.bfloat16: 1e-2, jnp.float32: 2e-6}


def tol_for(dtype, width):
  # float32 row sums (of exp, of dy) carry rounding that grows with the
  # row's length, in the oracle's order as in the kernels'.
  return TOL[dtype] * (max(1.0, width / 1000) if dtype == jnp.float32 else 1.0)


def rows_for(width):
  return 5 if width <= 16384 else 2


def close(got, want, tol, atol_of_max=1e-2):
  got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
  ok = np.isfinite(want)
  scale = max(1.0, float(np.abs(want[ok]).max(initial=0.0)))
  np.testing.assert_allclose(got[ok], want[ok], rtol=tol, atol=tol * scale * atol_of_max)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("masked", [False, True], ids=["plain", "where"])
@pytest.mark.parametrize("dtype,width", CASES, ids=IDS)
def test_rows_of_every_split(dtype, width, masked, log):
  op = jaxdnn.log_softmax if log else jaxdnn.softmax
  k = jax.random.split(jax.random.key(width), 3)
  shape = (rows_for(width), width)
  x = (jax.random.normal(k[0], shape) * 3).astype(dtype)
  dy = jax.random.normal(k[1], shape).astype(dtype)
  where = jax.random.bernoulli(k[2], 0.8, shape).at[:, 0].set(True) if masked else None

  def run(impl):
    y, vjp = jax.vjp(lambda x: op(x, where=where, implementation=impl), x)
    return y, vjp(dy)[0]

  y, dx = jax.jit(lambda: run(None))()
  y_ref, dx_ref = jax.jit(lambda: run("xla"))()
  close(y, y_ref, tol_for(dtype, width))
  # dx subtracts a sum over the row from each entry: absolute error on the
  # scale of the row's largest gradient.
  close(dx, dx_ref, tol_for(dtype, width) * (2 if dtype == jnp.bfloat16 else 10), atol_of_max=1.0)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("what", ["nan", "posinf", "all_neginf"])
@pytest.mark.parametrize("width", [16392, 131080], ids=["2ctas", "8ctas"])
def test_nan_and_inf_in_a_later_share(width, what, log):
  op = jaxdnn.log_softmax if log else jaxdnn.softmax
  x = jax.random.normal(jax.random.key(0), (3, width)).astype(jnp.bfloat16)
  col = width - 5  # in the last CTA's share
  x = {
    "nan": x.at[1, col].set(jnp.nan),
    "posinf": x.at[1, col].set(jnp.inf),
    "all_neginf": x.at[1].set(-jnp.inf),
  }[what]
  close(op(x), op(x, implementation="xla"), 1e-2)


# Cross-entropy rows: the vector kernels stream a row in chunks of 4 vectors
# a thread (the label may sit in any chunk) and write dlogits in chunks of
# 1024 vectors; the other widths take the warp kernels.
CE_WIDTHS = {
  jnp.bfloat16: [8, 1000, 4096, 32000, 131080, 4097],
  jnp.float32: [4, 1000, 8196, 65540, 4097],
}
CE_CASES = [(d, w) for d, ws in CE_WIDTHS.items() for w in ws]


@pytest.mark.parametrize(
  "kw", [{}, dict(label_smoothing=0.1, z_loss=1e-3, ignore_index=2)], ids=["plain", "options"]
)
@pytest.mark.parametrize(
  "dtype,width", CE_CASES, ids=[f"{jnp.dtype(d).name}-{w}" for d, w in CE_CASES]
)
def test_cross_entropy_rows(dtype, width, kw):
  rows = 6
  k = jax.random.split(jax.random.key(width), 3)
  x = (jax.random.normal(k[0], (rows, width)) * 3).astype(dtype)
  labels = jax.random.randint(k[1], (rows,), 0, width)
  labels = (
    labels.at[0].set(width - 1).at[1].set(0).at[2].set(2)
  )  # last column, first, ignored (options)
  g = jax.random.uniform(k[2], (rows,), minval=0.5, maxval=2.0)

  def run(impl):
    f = lambda x: jaxdnn.softmax_cross_entropy(
      x, labels, reduction="none", implementation=impl, **kw
    )
    loss, vjp = jax.vjp(f, x)
    return loss, vjp(g)[0]

  loss, dx = jax.jit(lambda: run(None))()
  loss_ref, dx_ref = jax.jit(lambda: run("xla"))()
  close(loss, loss_ref, 1e-5 * max(1.0, width / 1000), atol_of_max=1.0)
  close(dx, dx_ref, tol_for(dtype, width) * 2, atol_of_max=1.0)


@pytest.mark.parametrize("what", ["nan", "posinf", "all_neginf"])
def test_cross_entropy_nan_and_inf_in_a_later_chunk(what):
  width = 32000
  x = jax.random.normal(jax.random.key(0), (3, width)).astype(jnp.bfloat16)
  x = {
    "nan": x.at[1, width - 5].set(jnp.nan),
    "posinf": x.at[1, width - 5].set(jnp.inf),
    "all_neginf": x.at[1].set(-jnp.inf),
  }[what]
  labels = jnp.array([3, 7, width - 1])
  f = lambda impl: jaxdnn.softmax_cross_entropy(x, labels, reduction="none", implementation=impl)
  close(f(None), f("xla"), 1e-5, atol_of_max=1.0)
