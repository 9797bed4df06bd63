"""softmax_cross_entropy under the conformance checks (per-row losses), and
against optax and the oracle: reductions, label smoothing, z-loss,
ignore_index (all ignored too), invalid labels, extreme logits, errors;
probability labels (against optax and the oracle, their own gradient too)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import ConformanceSuite, OpSpec, Sharded, normal
from jax.sharding import PartitionSpec as P
from softmax_cases import grad_tol, tol

import jaxdnn

SHAPES = [(4, 1), (3, 5), (7, 1000), (2, 3, 65), (1, 4097), (33, 128)]


def per_row(logits, labels, implementation=None):
  return jaxdnn.softmax_cross_entropy(
    logits,
    labels,
    label_smoothing=0.1,
    z_loss=1e-3,
    ignore_index=-1,
    reduction="none",
    implementation=implementation,
  )


def make_inputs(rng, shape, dtype):
  logits = normal(rng, shape, dtype, scale=3.0)
  labels = rng.integers(0, shape[-1], size=shape[:-1])
  labels[..., 0] = -1  # an ignored row in every batch
  return logits, jnp.asarray(labels, jnp.int32)


class TestCrossEntropy(ConformanceSuite):
  spec = OpSpec(
    name="softmax_cross_entropy",
    fn=per_row,
    make_inputs=make_inputs,
    shapes=SHAPES,
    grad_shapes=[(4, 3), (7, 1000), (2, 3, 65)],
    tol=tol,
    grad_tol=grad_tol,
    fwd_target="jaxdnn_cross_entropy_fwd",
    bwd_target="jaxdnn_cross_entropy_bwd",
    small_shape=(5, 40),
    check_grads_shape=(3, 7),
    diff_argnums=(0,),
    data_argnums=(0, 1),
    sharded=Sharded(
      mesh_shape=(2, 2),
      axis_names=("data", "model"),
      shape=(8, 6, 64),
      in_specs=(P("data", "model", None), P("data", "model")),
      out_specs=(P("data", "model"),),
      bwd_all_reduce=False,
    ),
  )


def rand(shape, dtype=jnp.float32, seed=0, scale=3.0):
  return (jax.random.normal(jax.random.key(seed), shape) * scale).astype(dtype)


def labels_for(shape, seed=1):
  return jax.random.randint(jax.random.key(seed), shape[:-1], 0, shape[-1])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_matches_optax(reduction):
  optax = pytest.importorskip("optax")
  x, y = rand((6, 37)), labels_for((6, 37))
  want = optax.softmax_cross_entropy_with_integer_labels(x, y)
  want = {"mean": jnp.mean(want), "sum": jnp.sum(want), "none": want}[reduction]
  got = jaxdnn.softmax_cross_entropy(x, y, reduction=reduction)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-6, atol=2e-6)
  g = lambda f: jax.grad(lambda x: jnp.sum(f(x)))(x)
  fo = lambda x: optax.softmax_cross_entropy_with_integer_labels(x, y)
  np.testing.assert_allclose(
    g(lambda x: jaxdnn.softmax_cross_entropy(x, y, reduction="none")), g(fo), atol=2e-6
  )


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize(
  "kw", [{}, {"label_smoothing": 0.2}, {"z_loss": 1e-2}, {"ignore_index": 3}], ids=str
)
def test_options_match_the_oracle(dtype, kw):
  x, y = rand((9, 130), dtype), labels_for((9, 130)).at[2].set(3)
  for reduction in ("mean", "sum", "none"):
    f = lambda impl: jaxdnn.softmax_cross_entropy(
      x, y, reduction=reduction, implementation=impl, **kw
    )
    np.testing.assert_allclose(np.asarray(f(None)), np.asarray(f("xla")), rtol=1e-5, atol=1e-5)
  g = lambda impl: jax.grad(
    lambda x: jaxdnn.softmax_cross_entropy(x, y, implementation=impl, **kw)
  )(x)
  tol = 2e-6 if dtype == jnp.float32 else 1e-2
  np.testing.assert_allclose(
    np.asarray(g(None), np.float32), np.asarray(g("xla"), np.float32), atol=tol
  )


def test_ignored_rows_and_all_ignored():
  x, y = rand((4, 10)), jnp.array([1, -100, 3, -100])
  per = jaxdnn.softmax_cross_entropy(x, y, ignore_index=-100, reduction="none")
  assert float(per[1]) == 0.0 and float(per[3]) == 0.0
  mean = jaxdnn.softmax_cross_entropy(x, y, ignore_index=-100)
  np.testing.assert_allclose(float(mean), float(per[0] + per[2]) / 2, rtol=1e-6)
  g = jax.grad(lambda x: jaxdnn.softmax_cross_entropy(x, y, ignore_index=-100))(x)
  assert np.all(np.asarray(g)[[1, 3]] == 0)
  none = jnp.full((4,), -100)
  assert np.isnan(float(jaxdnn.softmax_cross_entropy(x, none, ignore_index=-100)))
  assert float(jaxdnn.softmax_cross_entropy(x, none, ignore_index=-100, reduction="sum")) == 0.0


@pytest.mark.parametrize("label", [-1, 10, 2**31 - 1])
def test_invalid_labels_give_nan(label):
  x, y = rand((3, 10)), jnp.array([1, label, 2])
  for impl in (None, "xla"):
    per = np.asarray(jaxdnn.softmax_cross_entropy(x, y, reduction="none", implementation=impl))
    assert np.isnan(per[1]) and np.isfinite(per[[0, 2]]).all(), impl


def test_extreme_logits():
  x = rand((5, 300), jnp.bfloat16, scale=1e4)
  y = labels_for((5, 300))
  got = jaxdnn.softmax_cross_entropy(x, y, reduction="none")
  want = jaxdnn.softmax_cross_entropy(x, y, reduction="none", implementation="xla")
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5)
  x = x.at[1, 4].set(-jnp.inf)
  assert np.isfinite(np.asarray(jaxdnn.softmax_cross_entropy(x, y, reduction="none"))).all()


def test_errors_name_the_argument():
  x, y = rand((2, 3)), jnp.array([0, 1])
  cases = [
    (dict(logits=[1.0]), TypeError, "logits must be an array"),
    (dict(logits=jnp.ones((2, 3), jnp.int32)), TypeError, "logits must be float"),
    (dict(logits=jnp.ones((2, 0))), ValueError, "at least one class"),
    (dict(labels=jnp.array([0.0, 1.0])), ValueError, "probability labels must have"),
    (dict(labels=jnp.ones((2, 3), bool)), TypeError, "labels must be integer class indices or"),
    (dict(labels=jnp.ones((2, 3)) / 3, ignore_index=0), ValueError, "ignore_index applies"),
    (dict(labels=jnp.array([0, 1, 2])), ValueError, "labels must have logits' shape"),
    (dict(label_smoothing=1.5), ValueError, "label_smoothing must be in"),
    (dict(label_smoothing="a"), TypeError, "label_smoothing must be a Python float"),
    (dict(z_loss=-1.0), ValueError, "z_loss must be in"),
    (dict(ignore_index=1.0), TypeError, "ignore_index must be an int"),
    (dict(ignore_index=2**40), ValueError, "ignore_index must fit in int32"),
    (dict(reduction="avg"), ValueError, "reduction must be one of"),
    (dict(implementation="triton"), ValueError, "implementation must be one of"),
  ]
  for change, error, match in cases:
    kw = dict(logits=x, labels=y) | change
    with pytest.raises(error, match=match):
      jaxdnn.softmax_cross_entropy(kw.pop("logits"), kw.pop("labels"), **kw)


def soft_per_row(logits, targets, implementation=None):
  return jaxdnn.softmax_cross_entropy(
    logits,
    targets,
    label_smoothing=0.1,
    z_loss=1e-3,
    reduction="none",
    implementation=implementation,
  )


def soft_inputs(rng, shape, dtype):
  logits = normal(rng, shape, dtype, scale=3.0)
  t = rng.random(shape, dtype=np.float32) ** 3
  return logits, jnp.asarray(t / t.sum(-1, keepdims=True), dtype)


class TestSoftCrossEntropy(ConformanceSuite):
  spec = OpSpec(
    name="softmax_cross_entropy(probabilities)",
    fn=soft_per_row,
    make_inputs=soft_inputs,
    shapes=SHAPES,
    grad_shapes=[(4, 3), (7, 1000), (2, 3, 65)],
    tol=tol,
    grad_tol=grad_tol,
    fwd_target="jaxdnn_soft_cross_entropy_fwd",
    bwd_target="jaxdnn_soft_cross_entropy_bwd",
    small_shape=(5, 40),
    check_grads_shape=(3, 7),
    diff_argnums=(0, 1),
    data_argnums=(0, 1),
    sharded=Sharded(
      mesh_shape=(2, 2),
      axis_names=("data", "model"),
      shape=(8, 6, 64),
      in_specs=(P("data", "model", None), P("data", "model", None)),
      out_specs=(P("data", "model"),),
      bwd_all_reduce=False,
    ),
  )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_probability_labels_match_optax(reduction):
  optax = pytest.importorskip("optax")
  x = rand((6, 37))
  q = jax.nn.softmax(rand((6, 37), seed=5))
  want = optax.softmax_cross_entropy(x, q)
  want = {"mean": jnp.mean(want), "sum": jnp.sum(want), "none": want}[reduction]
  got = jaxdnn.softmax_cross_entropy(x, q, reduction=reduction)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-6, atol=2e-6)
  f = lambda ce: jax.grad(lambda x, q: jnp.sum(ce(x, q) * jnp.arange(6.0)), (0, 1))(x, q)
  ours = f(lambda x, q: jaxdnn.softmax_cross_entropy(x, q, reduction="none"))
  theirs = f(optax.softmax_cross_entropy)
  for a, b in zip(ours, theirs):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_one_hot_labels_equal_integer_labels():
  x, y = rand((9, 130)), labels_for((9, 130))
  q = jax.nn.one_hot(y, 130)
  for kw in ({}, {"label_smoothing": 0.2, "z_loss": 1e-2}):
    a = jaxdnn.softmax_cross_entropy(x, q, reduction="none", **kw)
    b = jaxdnn.softmax_cross_entropy(x, y, reduction="none", **kw)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    ga = jax.grad(lambda x: jaxdnn.softmax_cross_entropy(x, q, **kw))(x)
    gb = jax.grad(lambda x: jaxdnn.softmax_cross_entropy(x, y, **kw))(x)
    np.testing.assert_allclose(np.asarray(ga), np.asarray(gb), atol=1e-6)
