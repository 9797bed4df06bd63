"""linear_cross_entropy against the unfused composition (hidden @ weight,
then softmax_cross_entropy, implementation="xla"): values and gradients of
hidden, weight and bias for every reduction and option, chunk sizes that do
and do not divide the tokens, leading dims, vmap, the kernels' custom calls
in the compiled HLO, the memory the loss holds, and errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import on_gpu

import jaxdnn

IMPL = "cuda" if on_gpu() else "cpu"


def problem(tokens=37, features=16, vocab=103, dtype=jnp.float32, seed=0, lead=()):
  k = jax.random.split(jax.random.key(seed), 4)
  h = jax.random.normal(k[0], lead + (tokens, features)).astype(dtype)
  w = (jax.random.normal(k[1], (features, vocab)) * 0.4).astype(dtype)
  b = (jax.random.normal(k[2], (vocab,)) * 0.5).astype(dtype)
  y = jax.random.randint(k[3], lead + (tokens,), 0, vocab)
  return h, w, b, y


def tol(dtype):
  return {
    jnp.dtype(jnp.float32): 2e-5,
    jnp.dtype(jnp.bfloat16): 3e-2,
    jnp.dtype(jnp.float16): 5e-3,
  }[jnp.dtype(dtype)]


def close(a, b, rtol):
  a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
  np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(1.0, float(np.max(np.abs(b)))))


def loss_and_grads(impl, h, w, b, y, reduction="mean", **kw):
  def f(h, w, b):
    out = jaxdnn.linear_cross_entropy(
      h, w, y, bias=b, reduction=reduction, implementation=impl, **kw
    )
    # A per-row cotangent that is not uniform, for reduction="none".
    return (
      out
      if reduction != "none"
      else jnp.sum(out * jnp.cos(jnp.arange(out.size)).reshape(out.shape))
    )

  return jax.jit(jax.value_and_grad(f, (0, 1, 2)))(h, w, b)


@pytest.mark.parametrize(
  "dtype", [jnp.float32, jnp.bfloat16, jnp.float16], ids=lambda d: jnp.dtype(d).name
)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("chunk", [8, 37, 64, None])
def test_matches_the_unfused_composition(dtype, reduction, chunk):
  h, w, b, y = problem(dtype=dtype)
  kw = dict(reduction=reduction, chunk_size=chunk)
  (v, g), (rv, rg) = loss_and_grads(IMPL, h, w, b, y, **kw), loss_and_grads("xla", h, w, b, y, **kw)
  close(v, rv, tol(dtype))
  for a, r in zip(g, rg):
    assert a.dtype == r.dtype
    close(a, r, tol(dtype))


@pytest.mark.parametrize(
  "kw",
  [{"label_smoothing": 0.1}, {"z_loss": 1e-3}, {"ignore_index": 5}, {"ignore_index": -100}],
  ids=str,
)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_options(kw, reduction):
  h, w, b, y = problem()
  y = y.at[::4].set(kw.get("ignore_index", 5))
  (v, g), (rv, rg) = (
    loss_and_grads(i, h, w, b, y, reduction=reduction, chunk_size=16, **kw) for i in (IMPL, "xla")
  )
  close(v, rv, 2e-5)
  for a, r in zip(g, rg):
    close(a, r, 2e-5)


def test_without_bias_and_with_leading_dims():
  h, w, _, y = problem(tokens=9, lead=(2, 3))
  f = lambda impl: jax.value_and_grad(
    lambda h, w: jaxdnn.linear_cross_entropy(h, w, y, chunk_size=10, implementation=impl), (0, 1)
  )(h, w)
  (v, g), (rv, rg) = f(None), f("xla")
  close(v, rv, 2e-5)
  for a, r in zip(g, rg):
    close(a, r, 2e-5)
  per = jaxdnn.linear_cross_entropy(h, w, y, reduction="none")
  assert per.shape == (2, 3, 9)


def test_all_ignored_and_forward_only():
  h, w, b, y = problem(tokens=6)
  none = jnp.full((6,), -1)
  assert np.isnan(float(jaxdnn.linear_cross_entropy(h, w, none, ignore_index=-1)))
  assert float(jaxdnn.linear_cross_entropy(h, w, none, ignore_index=-1, reduction="sum")) == 0.0
  g = jax.grad(lambda w: jaxdnn.linear_cross_entropy(h, w, none, ignore_index=-1, reduction="sum"))(
    w
  )
  assert not np.any(np.asarray(g))
  # Without differentiation: the forward only (no gradient matmuls in the HLO).
  hlo = jax.jit(lambda h, w: jaxdnn.linear_cross_entropy(h, w, y)).lower(h, w).compile().as_text()
  assert "jaxdnn_cross_entropy_fwd" in hlo and "jaxdnn_cross_entropy_bwd" not in hlo


def test_vmap_and_custom_calls():
  h, w, b, y = problem(tokens=12, lead=(3,))
  f = lambda impl: jax.vmap(
    lambda h, y: jaxdnn.linear_cross_entropy(h, w, y, bias=b, chunk_size=5, implementation=impl)
  )
  close(f(None)(h, y), f("xla")(h, y), 2e-5)
  gw = lambda impl: jax.grad(
    lambda w: jnp.sum(
      jax.vmap(
        lambda h, y: jaxdnn.linear_cross_entropy(h, w, y, chunk_size=5, implementation=impl)
      )(h, y)
    )
  )(w)
  close(gw(None), gw("xla"), 2e-5)
  hlo = jax.jit(jax.grad(lambda w: jaxdnn.linear_cross_entropy(h[0], w, y[0]))).lower(w).compile()
  text = hlo.as_text()
  assert "jaxdnn_cross_entropy_fwd" in text and "jaxdnn_cross_entropy_bwd" in text


def test_holds_chunks_not_the_logits():
  """The compiled fwd+bwd's temporary memory: the unfused composition holds
  several [tokens, vocab] arrays; the fused loss about two chunks of them
  and the weight gradient's accumulator."""
  tokens, features, vocab = 4096, 256, 16000
  args = (
    jax.ShapeDtypeStruct((tokens, features), jnp.float32),
    jax.ShapeDtypeStruct((features, vocab), jnp.float32),
    jax.ShapeDtypeStruct((tokens,), jnp.int32),
  )

  def temp(impl):
    f = lambda h, w, y: jaxdnn.linear_cross_entropy(h, w, y, chunk_size=256, implementation=impl)
    c = jax.jit(jax.value_and_grad(f, (0, 1))).lower(*args).compile()
    return c.memory_analysis().temp_size_in_bytes

  logits = tokens * vocab * 4
  fused, unfused = temp(None), temp("xla")
  assert unfused >= 2 * logits
  assert fused <= unfused / 8, (fused, unfused)


@pytest.mark.parametrize(
  "call, error, match",
  [
    (lambda h, w, y: jaxdnn.linear_cross_entropy(h, w.T, y), ValueError, "weight must be"),
    (lambda h, w, y: jaxdnn.linear_cross_entropy(h, w.astype(jnp.bfloat16), y), TypeError, "dtype"),
    (lambda h, w, y: jaxdnn.linear_cross_entropy(h, w, y[:-1]), ValueError, "labels must have"),
    (
      lambda h, w, y: jaxdnn.linear_cross_entropy(h, w, y * 1.0),
      TypeError,
      "labels must be integer",
    ),
    (
      lambda h, w, y: jaxdnn.linear_cross_entropy(h, w, y, bias=w[:, 0]),
      ValueError,
      "bias must have",
    ),
    (lambda h, w, y: jaxdnn.linear_cross_entropy(h, w, y, chunk_size=0), ValueError, "chunk_size"),
    (
      lambda h, w, y: jaxdnn.linear_cross_entropy(h, w, y, reduction="avg"),
      ValueError,
      "reduction",
    ),
    (
      lambda h, w, y: jaxdnn.linear_cross_entropy(h, w, y, label_smoothing=2.0),
      ValueError,
      "label_smoothing",
    ),
  ],
)
def test_errors_name_the_argument(call, error, match):
  h, w, _, y = problem(tokens=5, features=4, vocab=7)
  with pytest.raises(error, match=match):
    call(h, w, y)
