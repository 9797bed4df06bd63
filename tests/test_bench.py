"""The benchmark harness times what a training step runs: array keyword
arguments (segment ids, masks) reach the jitted functions as arguments, not
as constants baked into the executable (which cost the packed-document case
GPU idle time per call on an H200)."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn.attention.bench import HEADS, _fwd_and_fwdbwd, packed_document_ids


def _attend(q, k, v, **kw):
  return jax.nn.dot_product_attention(q, k, v, implementation="xla", **kw)


def test_array_keywords_are_jit_arguments_and_results_match():
  keys = jax.random.split(jax.random.PRNGKey(3), 3)
  q, k, v = (jax.random.normal(x, (2, 40, 2, 16), jnp.float32) for x in keys)
  seg = jnp.asarray(np.repeat(np.arange(4), 10)[None].repeat(2, 0), jnp.int32)
  mask = seg[:, None, :, None] == seg[:, None, None, :]
  fwd, fwdbwd = _fwd_and_fwdbwd(_attend, dict(is_causal=True, mask=mask))

  np.testing.assert_allclose(
    fwd(q, k, v), _attend(q, k, v, is_causal=True, mask=mask), rtol=1e-5, atol=1e-6
  )
  want = jax.grad(
    lambda q, k, v: jnp.sum(_attend(q, k, v, is_causal=True, mask=mask)), argnums=(0, 1, 2)
  )(q, k, v)
  for got, ref in zip(fwdbwd(q, k, v), want):
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)

  # The mask is an argument of the jitted computation (its fourth input), not a
  # constant folded into it (which would leave three).
  calls = [
    e for e in jax.make_jaxpr(fwd)(q, k, v).jaxpr.eqns if e.primitive.name in ("jit", "pjit")
  ]
  assert [len(e.invars) for e in calls] == [4]


def test_packed_document_ids_are_seeded_and_count_flops_inside_documents():
  # The harness and benchmarks/kernel_timing.py --packed time the same documents.
  ids, flops = packed_document_ids(128, seq=2048, batch=2, mean_doc=256)
  again, flops_again = packed_document_ids(128, seq=2048, batch=2, mean_doc=256)
  np.testing.assert_array_equal(ids, again)
  assert flops == flops_again and ids.shape == (2, 2048)
  want = 0.0
  for row in ids:
    assert np.all(np.diff(row) >= 0) and row[0] == 0  # documents numbered in order
    lengths = np.bincount(row)
    assert np.all(lengths > 0)
    want += sum(4 * HEADS * n * n * 128 / 2 for n in lengths)
  assert flops == want
