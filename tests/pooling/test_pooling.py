"""Pooling beyond the conformance base: Flax's max_pool / avg_pool, return
indices against numpy, gradients of dilated max pooling (which jax.grad of
lax.reduce_window cannot take), global average pooling, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import assert_close, normal

import jaxdnn


@pytest.fixture
def rng(request):
  return np.random.default_rng(abs(hash(request.node.nodeid)) % 2**32)


@pytest.mark.parametrize("padding", ["VALID", "SAME", ((1, 2), (0, 1))])
def test_matches_flax(rng, padding):
  nn = pytest.importorskip("flax.linen")
  x = normal(rng, (2, 9, 8, 5))
  assert_close(
    jaxdnn.max_pool(x, (3, 2), (2, 1), padding), nn.max_pool(x, (3, 2), (2, 1), padding), 0
  )
  assert_close(
    jaxdnn.avg_pool(x, (3, 2), (2, 1), padding), nn.avg_pool(x, (3, 2), (2, 1), padding), 1e-6
  )
  assert_close(
    jaxdnn.avg_pool(x, (3, 2), (2, 1), padding, count_include_pad=False),
    nn.avg_pool(x, (3, 2), (2, 1), padding, count_include_pad=False),
    1e-6,
  )


def test_indices_point_at_the_first_maximum(rng):
  x = normal(rng, (2, 6, 7, 3))
  x = x.at[0, 0, 0, 0].set(5.0).at[0, 1, 1, 0].set(5.0)  # a tie in one window
  y, idx = jaxdnn.max_pool(x, (2, 2), (2, 2), return_indices=True)
  flat = np.asarray(x).reshape(2, 42, 3)
  got = np.take_along_axis(flat, np.asarray(idx).reshape(2, -1, 3), axis=1).reshape(y.shape)
  np.testing.assert_array_equal(got, np.asarray(y))
  assert int(idx[0, 0, 0, 0]) == 0  # the first of the tied maxima
  assert idx.dtype == jnp.int32


def test_dilated_max_pool_gradient(rng):
  x = normal(rng, (2, 9, 9, 4))
  f = lambda x: jnp.sum(jaxdnn.max_pool(x, (3, 3), 2, "SAME", dilation=2) ** 2)
  g = jax.grad(f)(x)
  r = jax.grad(
    lambda x: jnp.sum(jaxdnn.max_pool(x, (3, 3), 2, "SAME", dilation=2, implementation="xla") ** 2)
  )(x)
  assert_close(g, r, 1e-6)
  with pytest.raises(NotImplementedError):  # what jax.grad of reduce_window says
    jax.grad(
      lambda x: jnp.sum(
        jax.lax.reduce_window(
          x,
          -jnp.inf,
          jax.lax.max,
          (1, 3, 3, 1),
          (1, 1, 1, 1),
          "VALID",
          window_dilation=(1, 2, 2, 1),
        )
      )
    )(x)


def test_global_avg_pool(rng):
  x = normal(rng, (3, 5, 6, 7))
  assert_close(jaxdnn.global_avg_pool(x), jnp.mean(x, axis=(1, 2)), 1e-6)
  assert jaxdnn.global_avg_pool(x, keepdims=True).shape == (3, 1, 1, 7)


@pytest.mark.parametrize("impl", [None, "xla"])
def test_adaptive_pools(rng, impl):
  x = normal(rng, (2, 14, 12, 3))
  avg = lambda x, o: jaxdnn.adaptive_avg_pool(x, o, implementation=impl)
  mx = lambda x, o: jaxdnn.adaptive_max_pool(x, o, implementation=impl)
  assert_close(avg(x, (7, 4)), x.reshape(2, 7, 2, 4, 3, 3).mean((2, 4)), 1e-6)
  assert_close(mx(x, 1)[:, 0, 0], x.max((1, 2)), 0)
  # Uneven windows, PyTorch's: output o covers [floor(o in / out), ceil((o + 1) in / out)).
  want = np.stack(
    [np.asarray(x)[:, (o * 14) // 5 : -(-(o + 1) * 14 // 5)].mean(1) for o in range(5)], 1
  )
  got = avg(x, (5, 12))
  assert_close(got, want, 1e-6)
  with pytest.raises(ValueError, match="output_size"):
    avg(x, (0, 4))


def test_adaptive_pool_gradients(rng):
  x = normal(rng, (2, 9, 7, 3))
  for fn in (jaxdnn.adaptive_avg_pool, jaxdnn.adaptive_max_pool):
    g = lambda impl: jax.grad(lambda x: jnp.sum(fn(x, (4, 3), implementation=impl) ** 2))(x)
    assert_close(g(None), g("xla"), 1e-5)
  _, idx = jaxdnn.adaptive_max_pool(x, (4, 3), return_indices=True)
  assert idx.shape == (2, 4, 3, 3)


def test_all_padding_window(rng):
  x = normal(rng, (1, 2, 2, 1))
  y, idx = jaxdnn.max_pool(x, 1, 3, ((3, 0), (3, 0)), return_indices=True)
  assert float(y[0, 0, 0, 0]) == -np.inf and int(idx[0, 0, 0, 0]) == -1


@pytest.mark.parametrize(
  "call, error, match",
  [
    (lambda x: jaxdnn.max_pool(x, (2,)), ValueError, "window_shape"),
    (lambda x: jaxdnn.max_pool(x, (2, 0)), ValueError, "window_shape"),
    (lambda x: jaxdnn.max_pool(x, 2, strides=(1, 2, 3)), ValueError, "strides"),
    (lambda x: jaxdnn.max_pool(x, 2, padding="FULL"), ValueError, "padding"),
    (lambda x: jaxdnn.max_pool(x, 2, padding=((1, 1),)), ValueError, "padding"),
    (lambda x: jaxdnn.max_pool(x, 2, dilation=0), ValueError, "dilation"),
    (lambda x: jaxdnn.avg_pool(x, 2, count_include_pad=1), TypeError, "count_include_pad"),
    (lambda x: jaxdnn.max_pool(x[0, 0], 2), ValueError, "x must be"),
    (lambda x: jaxdnn.max_pool(x.astype(jnp.int32), 2), TypeError, "x must be float"),
    (
      lambda x: jaxdnn.max_pool(x, 2, return_indices=True, implementation="xla"),
      ValueError,
      "return_indices",
    ),
  ],
)
def test_errors_name_the_argument(call, error, match):
  with pytest.raises(error, match=match):
    call(jnp.ones((2, 5, 5, 3)))


def _fwd_calls(f, *args):
  """The compiled HLO's jaxdnn_pool_fwd lines: whether each writes an int32 index."""
  text = jax.jit(f).lower(*args).compile().as_text()
  lines = [ln for ln in text.splitlines() if 'custom_call_target="jaxdnn_pool_fwd"' in ln]
  return [("s32[" in ln.partition("custom-call(")[0]) for ln in lines]


def test_index_written_only_when_needed(rng):
  x = normal(rng, (2, 9, 8, 5))
  pool = lambda x: jaxdnn.max_pool(x, (3, 3), (2, 2), "SAME")
  loss = lambda x: jnp.sum(pool(x) ** 2)
  # The plain primal call (inference, jax.jit(max_pool)): y alone.
  assert _fwd_calls(pool, x) == [False]
  assert _fwd_calls(lambda x: jaxdnn.avg_pool(x, 3, 2), x) == [False]
  assert _fwd_calls(jax.grad(lambda x: jnp.sum(jaxdnn.avg_pool(x, 3, 2) ** 2)), x) == [False]
  # The gradient's forward keeps the index as the backward's residual.
  assert _fwd_calls(jax.grad(loss), x) == [True]
  assert _fwd_calls(lambda x: jax.value_and_grad(loss)(x), x) == [True]
  # return_indices asks for it, with or without a gradient.
  assert _fwd_calls(lambda x: jaxdnn.max_pool(x, 3, 2, return_indices=True), x) == [True]
  assert _fwd_calls(lambda x: jaxdnn.adaptive_max_pool(x, 3), x) == [False]
  # The same y either way, and the same gradient as the oracle.
  y, idx = jaxdnn.max_pool(x, (3, 3), (2, 2), "SAME", return_indices=True)
  np.testing.assert_array_equal(np.asarray(jax.jit(pool)(x)), np.asarray(y))
  assert_close(
    jax.grad(loss)(x),
    jax.grad(
      lambda x: jnp.sum(jaxdnn.max_pool(x, (3, 3), (2, 2), "SAME", implementation="xla") ** 2)
    )(x),
    1e-6,
  )
  # vmap of the primal and of the gradient.
  xs = jnp.stack([x, 2 * x])
  np.testing.assert_array_equal(np.asarray(jax.vmap(pool)(xs))[0], np.asarray(y))
  assert jax.vmap(jax.grad(loss))(xs).shape == xs.shape


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize(
  "shape",
  [(3, 7, 7, 13), (2, 5, 24), (2, 3, 4, 5, 40), (4, 1, 1, 8), (2, 9, 11, 1), (2, 6, 6, 2048)],
)
def test_whole_input_average(rng, dtype, shape):
  """One output covering every input position, no padding (global average
  pooling; on CUDA a column reduction and a broadcast backward), reached by
  global_avg_pool, avg_pool with the input's spatial dims as the window, and
  adaptive_avg_pool to 1; odd channel counts take the per-element path."""
  tol, gtol = (1e-6, 1e-6) if dtype == jnp.float32 else (1e-2, 1e-2)
  x = normal(rng, shape, dtype, scale=2.0, offset=0.5)
  spatial = shape[1:-1]
  want = jnp.mean(x.astype(jnp.float32), axis=tuple(range(1, len(shape) - 1))).astype(dtype)
  assert_close(jaxdnn.global_avg_pool(x), want, tol)
  ones = (1,) * len(spatial)
  assert_close(jaxdnn.avg_pool(x, spatial).reshape(want.shape), want, tol)
  assert_close(
    jaxdnn.avg_pool(x, spatial, 3, count_include_pad=False).reshape(want.shape), want, tol
  )
  assert_close(jaxdnn.adaptive_avg_pool(x, ones).reshape(want.shape), want, tol)
  # The backward: dy / count at every position.
  w = normal(rng, want.shape, dtype)
  grad = lambda impl: jax.grad(
    lambda x: jnp.sum(jaxdnn.global_avg_pool(x, implementation=impl).astype(jnp.float32) * w)
  )(x)
  g = grad(None)
  assert g.dtype == x.dtype
  assert_close(g, grad("xla"), gtol)
  count = int(np.prod(spatial))
  expect = (w.astype(jnp.float32) / count).astype(dtype)
  full = jnp.broadcast_to(expect.reshape((shape[0],) + ones + (shape[-1],)), shape)
  assert_close(g, full, gtol)


def test_one_window_with_padding_is_not_whole(rng):
  """One output whose window has padding (not the whole-input path): against the oracle."""
  x = normal(rng, (2, 5, 6, 3))
  for cip in (True, False):
    f = lambda impl, cip=cip: jaxdnn.avg_pool(
      x, (6, 7), 7, ((1, 0), (0, 1)), count_include_pad=cip, implementation=impl
    )
    assert f(None).shape == (2, 1, 1, 3)
    assert_close(f(None), f("xla"), 1e-6)
    g = lambda impl, f=f: jax.grad(lambda x: jnp.sum(f(impl) ** 2))(x)
    assert_close(g(None), g("xla"), 1e-5)
