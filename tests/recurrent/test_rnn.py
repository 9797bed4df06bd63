"""jaxdnn.rnn on its CPU kernel against the plain-JAX oracle (reference.py):
values and gradients for every mode, layers, directions, lengths, dtypes;
jit, vmap (shared and per-example weights), vmap(grad), check_grads; the
custom call in the compiled HLO; errors that name the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import on_gpu, requires_cpu_backend
from jax.test_util import check_grads

import jaxdnn
from jaxdnn.recurrent.layout import init_params
from jaxdnn.recurrent.reference import rnn_reference

MODES = ["lstm", "gru", "rnn_tanh", "rnn_relu"]


def _case(mode, *, layers=2, bi=True, batch=3, steps=6, feat=5, hidden=7, seed=0):
  k = jax.random.split(jax.random.key(seed), 3)
  params = init_params(k[0], mode, feat, hidden, num_layers=layers, bidirectional=bi)
  x = jax.random.normal(k[1], (batch, steps, feat))
  return params, x


def _loss(impl, mode, **kw):
  def f(params, x):
    out, state = jaxdnn.rnn(x, params, mode=mode, implementation=impl, **kw)
    w = jnp.cos(jnp.arange(out.size, dtype=jnp.float32)).reshape(out.shape)
    return jnp.sum(out.astype(jnp.float32) * w) + sum(
      jnp.sum(jnp.sin(s.astype(jnp.float32))) for s in jax.tree.leaves(state)
    )

  return f


def _close(a, b, tol):
  # On a GPU the kernel is CUDA's (its float32 against XLA's: see
  # test_conformance.tol); exact comparisons stay exact.
  tol = max(tol, 3e-5) if tol and on_gpu() else tol
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(
      np.asarray(x, np.float32), np.asarray(y, np.float32), atol=tol, rtol=tol
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bi", [False, True])
@pytest.mark.parametrize("lengths", [None, (6, 2, 0)], ids=["full", "ragged"])
@requires_cpu_backend  # the CUDA twin: test_rnn_cuda.py's float32 test
def test_values_and_gradients_match_the_oracle(mode, bi, lengths):
  params, x = _case(mode, bi=bi)
  kw = dict(seq_lengths=None if lengths is None else jnp.array(lengths))
  got = jaxdnn.rnn(x, params, mode=mode, implementation="cpu", **kw)
  _close(got, rnn_reference(x, params, mode=mode, **kw), 2e-6)
  g = jax.grad(_loss("cpu", mode, **kw), argnums=(0, 1))(params, x)
  _close(g, jax.grad(_loss("xla", mode, **kw), argnums=(0, 1))(params, x), 2e-5)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_initial_state_time_major_and_bfloat16(mode):
  params, x = _case(mode, layers=1, bi=True)
  n = 2 if mode == "lstm" else 1
  states = [0.3 * jax.random.normal(jax.random.key(7 + i), (2, 3, 7)) for i in range(n)]
  init = tuple(states) if mode == "lstm" else states[0]
  kw = dict(initial_state=init, seq_lengths=jnp.array([4, 6, 1]))
  want = rnn_reference(x, params, mode=mode, **kw)
  _close(jaxdnn.rnn(x, params, mode=mode, **kw), want, 2e-6)
  tm = jaxdnn.rnn(jnp.swapaxes(x, 0, 1), params, mode=mode, time_major=True, **kw)
  _close((jnp.swapaxes(tm[0], 0, 1), tm[1]), want, 2e-6)
  xb = x.astype(jnp.bfloat16)
  got = jaxdnn.rnn(xb, params, mode=mode, **kw)
  assert got[0].dtype == jnp.bfloat16
  _close(got, rnn_reference(xb, params, mode=mode, **kw), 2e-2)
  g = jax.grad(_loss(None, mode, **kw), argnums=(0, 1))(params, xb)
  _close(g, jax.grad(_loss("xla", mode, **kw), argnums=(0, 1))(params, xb), 5e-2)


@pytest.mark.parametrize("mode", MODES)
def test_check_grads_float32(mode):
  params, x = _case(mode, layers=1, bi=True, batch=2, steps=4, feat=3, hidden=4)
  lengths = jnp.array([4, 2])
  check_grads(
    lambda p, x: _loss(None, mode, seq_lengths=lengths)(p, x),
    (params, x),
    order=1,
    modes=("rev",),
    atol=2e-2,
    rtol=2e-2,
  )


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_jit_vmap_and_per_example_gradients(mode):
  params, x = _case(mode, layers=2, bi=True, batch=2)
  xs = jnp.stack([x, 0.5 * x + 0.1])  # [2 examples, batch, time, feat]
  f = lambda impl: jax.jit(
    jax.vmap(lambda x: jaxdnn.rnn(x, params, mode=mode, implementation=impl))
  )
  _close(f(None)(xs), f("xla")(xs), 2e-6)
  pg = lambda impl: jax.vmap(jax.grad(_loss(impl, mode)), in_axes=(None, 0))(params, xs)
  _close(pg(None), pg("xla"), 2e-5)
  # Per-example weights (vmapped parameters) too.
  ps = jax.tree.map(lambda a: jnp.stack([a, 0.9 * a]), params)
  pw = lambda impl: jax.vmap(jax.grad(_loss(impl, mode)))(ps, xs)
  _close(pw(None), pw("xla"), 2e-5)


def test_the_recurrence_is_jaxdnns_custom_call():
  params, x = _case("lstm", layers=1, bi=False)
  hlo = jax.jit(jax.grad(_loss(None, "lstm"))).lower(params, x).compile().as_text()
  assert "jaxdnn_rnn_fwd" in hlo and "jaxdnn_rnn_bwd" in hlo


def test_dropout_between_layers():
  params, x = _case("gru", layers=2, bi=False)
  base = jaxdnn.rnn(x, params, mode="gru")
  same = jaxdnn.rnn(x, params, mode="gru", dropout_rate=0.0, dropout_rng=jax.random.key(0))
  _close(base, same, 0.0)
  a = jaxdnn.rnn(x, params, mode="gru", dropout_rate=0.5, dropout_rng=jax.random.key(1))
  b = jaxdnn.rnn(x, params, mode="gru", dropout_rate=0.5, dropout_rng=jax.random.key(1))
  _close(a, b, 0.0)
  assert not np.allclose(np.asarray(a[0]), np.asarray(base[0]))
  ax = jaxdnn.rnn(
    x, params, mode="gru", dropout_rate=0.5, dropout_rng=jax.random.key(1), implementation="xla"
  )
  _close(a, ax, 2e-6)


@pytest.mark.parametrize(
  "kw, match",
  [
    (dict(mode="lstmm"), "mode must be one of"),
    (dict(mode="lstm", num_layers=3), "num_layers=3"),
    (dict(mode="lstm", bidirectional=False), "bidirectional=False"),
    (dict(mode="lstm", dropout_rate=0.5), "needs dropout_rng"),
    (dict(mode="lstm", dropout_rate=1.0, dropout_rng=jax.random.key(0)), "dropout_rate must be in"),
    (
      dict(mode="lstm", seq_lengths=jnp.ones((2,), jnp.int32)),
      "seq_lengths must be integers of shape",
    ),
    (dict(mode="lstm", seq_lengths=jnp.ones((3,))), "seq_lengths must be integers"),
    (dict(mode="lstm", initial_state=jnp.zeros((4, 3, 7))), "initial_state must be a pair"),
    (dict(mode="gru", initial_state=jnp.zeros((1, 3, 7))), "initial_state must be h of shape"),
    (dict(mode="lstm", implementation="tpu"), "implementation"),
  ],
)
def test_errors_name_the_argument(kw, match):
  mode = kw.get("mode", "lstm") if kw.get("mode") in MODES else "lstm"
  params, x = _case(mode, layers=2, bi=True)
  with pytest.raises(ValueError, match=match):
    jaxdnn.rnn(x, params, **kw)


def test_bad_params_and_inputs_are_refused():
  params, x = _case("lstm", layers=1, bi=False)
  with pytest.raises(ValueError, match="x must be"):
    jaxdnn.rnn(x[0], params, mode="lstm")
  with pytest.raises(ValueError, match="must have shape"):
    jaxdnn.rnn(x, params, mode="gru")
  with pytest.raises(ValueError, match="floating-point"):
    jaxdnn.rnn(x.astype(jnp.int32), params, mode="lstm")
