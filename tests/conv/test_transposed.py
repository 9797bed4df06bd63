"""conv/transposed.py: input-dilated convolutions (conv_transpose's) on XLA's
convolutions as the data gradient of the strided convolution they transpose
(the path the GPU default takes, where the sm90 kernels take no input
dilation). Its values and both gradients against the oracle, and which
geometries it takes."""

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import assert_close, normal

from jaxdnn.conv import geometry as geom
from jaxdnn.conv import reference, transposed


@pytest.fixture
def rng(request):
  return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# conv_transpose problems: (x shape, w shape, stride, padding, kernel dilation).
CASES = [
  ((2, 5, 6, 8), (4, 4, 8, 6), 2, "SAME", 1),
  ((2, 4, 5, 6, 4), (3, 3, 3, 4, 5), 2, "SAME", 1),
  ((2, 7, 3), (5, 3, 4), 3, "VALID", 1),
  ((1, 6, 7, 4), (3, 3, 4, 4), 2, ((1, 2), (0, 1)), 1),
  ((2, 9, 5), (3, 5, 2), 2, "SAME", 2),
]


def _geometry(xs, ws, s, pad, d):
  n = len(xs) - 2
  pads = geom.transpose_pads("t", pad, ws[:n], (s,) * n, (d,) * n)
  return geom.make("t", xs, ws, 1, pads, (s,) * n, d, 1)[0]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_values_and_gradients_match_the_oracle(rng, case):
  xs, ws, s, pad, d = CASES[case]
  g = _geometry(xs, ws, s, pad, d)
  assert transposed.serves(g)
  x, w = normal(rng, xs), normal(rng, ws, scale=0.3)
  ct = normal(rng, (xs[0], *g.out, ws[-1]))
  got = jax.jit(lambda x, w: reference.conv(x, w, g, native=True))(x, w)
  assert_close(got, reference.conv(x, w, g), 2e-5)

  def loss(native):
    return lambda x, w: jnp.sum(reference.conv(x, w, g, native=native) * ct)

  for a, e in zip(jax.grad(loss(True), (0, 1))(x, w), jax.grad(loss(False), (0, 1))(x, w)):
    assert_close(a, e, 5e-5)


def test_takes_only_transposed_geometries():
  assert not transposed.serves(geom.make("t", (1, 8, 8, 4), (3, 3, 4, 4), 1, "SAME", 1, 1, 1)[0])
  grouped = geom.make("t", (1, 8, 8, 4), (3, 3, 2, 4), 1, ((1, 1), (1, 1)), 2, 1, 2)[0]
  assert not transposed.serves(grouped)
  # Padding past the dilated window: the strided problem would need a negative pad.
  wide = geom.make("t", (1, 6, 4), (3, 4, 4), 1, ((5, 5),), 2, 1, 1)[0]
  assert not transposed.serves(wide)
