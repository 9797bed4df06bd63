"""jaxdnn.rnn on its persistent CUDA kernel (cpp/recurrent/sm80) against the
plain-JAX oracle: every mode, directions, ragged lengths, float32 and
bfloat16 (the weights then kept in bfloat16, as cuDNN's), hidden sizes with
resident weight slices and ones that stream from L2; gradients; the custom
calls in the HLO; bitwise repeatable results. GPU only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdnn
from jaxdnn.recurrent.layout import init_params

pytestmark = pytest.mark.skipif(jax.default_backend() != "gpu", reason="CUDA kernel: GPU only")

MODES = ["lstm", "gru", "rnn_tanh", "rnn_relu"]


def _case(mode, *, layers=1, bi=False, batch=5, steps=9, feat=16, hidden=33, dtype=jnp.float32):
  k = jax.random.split(jax.random.key(hidden + batch), 2)
  params = init_params(k[0], mode, feat, hidden, num_layers=layers, bidirectional=bi)
  x = jax.random.normal(k[1], (batch, steps, feat)).astype(dtype)
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
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    scale = max(1.0, float(np.max(np.abs(y))))
    np.testing.assert_allclose(x, y, atol=tol * scale, rtol=tol)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bi", [False, True])
@pytest.mark.parametrize("lengths", [None, (9, 1, 0, 4, 9)], ids=["full", "ragged"])
def test_float32_matches_the_oracle(mode, bi, lengths):
  params, x = _case(mode, bi=bi, layers=2)
  kw = dict(seq_lengths=None if lengths is None else jnp.array(lengths))
  # Both sides' input projections (XLA's dots) in full float32: by default a
  # GPU's float32 dot may run in TF32 (~1e-3 relative), which is not the
  # recurrence's error.
  with jax.default_matmul_precision("highest"):
    got = jaxdnn.rnn(x, params, mode=mode, implementation="cuda", **kw)
    g = jax.grad(_loss("cuda", mode, **kw), argnums=(0, 1))(params, x)
    want = jaxdnn.rnn(x, params, mode=mode, implementation="xla", **kw)
    g_want = jax.grad(_loss("xla", mode, **kw), argnums=(0, 1))(params, x)
  _close(got, want, 2e-4)
  _close(g, g_want, 2e-3)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.parametrize("hidden", [256, 1024, 2048])
def test_bfloat16_large_hidden(mode, hidden):
  # 2048: the LSTM's bf16 slices stream from L2 (rnn_plan.h); the GRU's
  # forward slice still fits, its backward streams.
  params, x = _case(mode, batch=3, steps=5, feat=64, hidden=hidden, dtype=jnp.bfloat16)
  lengths = jnp.array([5, 0, 3])
  got = jaxdnn.rnn(x, params, mode=mode, seq_lengths=lengths, implementation="cuda")
  with jax.default_matmul_precision("highest"):
    want = jaxdnn.rnn(
      x.astype(jnp.float32), params, mode=mode, seq_lengths=lengths, implementation="xla"
    )
  _close(got, want, 3e-2)
  g = jax.grad(_loss("cuda", mode, seq_lengths=lengths), argnums=(0, 1))(params, x)
  g_want = jax.grad(_loss("xla", mode, seq_lengths=lengths), argnums=(0, 1))(params, x)
  _close(g, g_want, 6e-2)


def test_the_kernels_are_in_the_hlo_and_repeatable():
  params, x = _case("lstm", batch=17, steps=12, hidden=64)
  f = jax.jit(jax.value_and_grad(_loss(None, "lstm"), argnums=(0, 1)))
  hlo = f.lower(params, x).compile().as_text()
  assert "jaxdnn_rnn_fwd" in hlo and "jaxdnn_rnn_bwd" in hlo
  a, b = f(params, x), f(params, x)
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def test_zero_steps_and_batch_one():
  params, x = _case("gru", batch=1, steps=1, hidden=3)
  got = jaxdnn.rnn(x, params, mode="gru", implementation="cuda")
  _close(got, jaxdnn.rnn(x, params, mode="gru", implementation="xla"), 2e-4)
  params, x = _case("lstm", batch=2, steps=0, hidden=8)
  out, (h, c) = jaxdnn.rnn(x, params, mode="lstm", implementation="cuda")
  assert out.shape == (2, 0, 8) and h.shape == (1, 2, 8)
  np.testing.assert_array_equal(np.asarray(h), 0.0)


def test_vmap_folds_into_the_batch():
  params, x = _case("lstm", batch=4, steps=6, hidden=32)
  xs = jnp.stack([x, 0.5 * x])
  got = jax.vmap(lambda x: jaxdnn.rnn(x, params, mode="lstm", implementation="cuda"))(xs)
  for i in range(2):
    want = jaxdnn.rnn(xs[i], params, mode="lstm", implementation="xla")
    _close(jax.tree.map(lambda a: a[i], got), want, 2e-4)
