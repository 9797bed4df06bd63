"""A small jax program that calls every CUDA kernel family once or twice,
forward and backward, for compute-sanitizer memcheck (run_selftests.sh):
attention (plain, causal GQA with bias, packed documents, decode, an odd head
dim), the norms (vector and scalar widths, a fused residual) and the
softmax family (rows in one CTA, split over 2 and 8 cluster CTAs, staged and
in registers, with and without `where`, two-pass widths; cross-entropy),
pooling (max with and without the index, average with padding, global,
adaptive, 3-D, odd channels), convolution (forward with the fused epilogue
and both gradients, 1-D to 3-D; the FFT convolution's mixing), bias_act,
glu, batch_norm and group_norm,
and the recurrences (LSTM bf16 with ragged lengths, bidirectional GRU
float32, a hidden size whose weight slices stream from L2)."""

import os
import sys

# No autotuning: under compute-sanitizer, cuDNN's graph-capture probing in
# XLA's convolution autotuner failed its captures and the process crashed
# (benchmarks/results/2026-11-28-h100-conv-heuristic/memcheck_jax.log).
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jaxdnn  # noqa: E402

IMPL = sys.argv[1] if len(sys.argv) > 1 else "cuda"  # "cpu": a smoke run without a GPU
# "cnn": only the CNN families (convolution, pooling, the CNN norms) and the
# memory-bound ops cnn_cases runs, for a short sanitizer run; "paged": only
# paged_attention's in-place decode; "bias": only the attention bias kernels
# (a boolean mask as a bias too);
# "dims": only the head dim 96 / 192 forwards; "grouped": only the grouped
# convolution kernels; "winograd": only the Winograd forwards.
ONLY = sys.argv[2] if len(sys.argv) > 2 else None
key = iter(jax.random.split(jax.random.key(0), 128))


def normal(shape, dtype=jnp.bfloat16):
  return jax.random.normal(next(key), shape, dtype)


def attention_cases():
  q, k, v = normal((2, 200, 8, 128)), normal((2, 200, 2, 128)), normal((2, 200, 2, 128))
  ids = jnp.repeat(jnp.arange(4), 50)[None].repeat(2, 0)
  yield dict(query=q, key=k, value=v)
  yield dict(query=q, key=k, value=v, is_causal=True, bias=normal((1, 8, 200, 200)))
  yield dict(query=q, key=k, value=v, query_segment_ids=ids, key_value_segment_ids=ids)
  yield dict(
    query=normal((2, 33, 4, 40), jnp.float16),
    key=normal((2, 70, 4, 40), jnp.float16),
    value=normal((2, 70, 4, 40), jnp.float16),
    local_window_size=(16, 0),
  )
  yield dict(
    query=normal((4, 1, 8, 64)), key=normal((4, 3000, 8, 64)), value=normal((4, 3000, 8, 64))
  )


def bias_cases():
  """The sm90 bias stages, forward and backward: the three copy widths (key
  counts 1024, 1030 and 1031), broadcasts over batch / heads / rows (dbias
  staged and summed, or stored whole), head dims 64/128/256, a partial last
  query tile, causal."""
  for kv, dim, shape in (
    (1024, 128, (1, 8, 300, 1024)),
    (1030, 64, (2, 1, 1, 1030)),
    (1031, 256, (2, 8, 300, 1031)),
    (1031, 128, (2, 8, 300, 1031)),
    (1024, 128, (2, 1, 1, 1024)),  # a key-padding row: the row stage's 16-byte copies
  ):
    q = normal((2, 300, 8, dim))
    k, v = normal((2, kv, 2, dim)), normal((2, kv, 2, dim))
    for causal in (False, True):
      f = lambda q, k, v, b: jnp.sum(
        jaxdnn.dot_product_attention(q, k, v, bias=b, is_causal=causal, implementation=IMPL).astype(
          jnp.float32
        )
      )
      jax.block_until_ready(jax.grad(f, argnums=(0, 1, 2, 3))(q, k, v, normal(shape)))
  # A boolean mask: the same kernels with a 0 / -inf bias and no dbias
  # target, alone and summed into a bias, a row with no key.
  q, k, v = normal((2, 300, 8, 128)), normal((2, 1031, 2, 128)), normal((2, 1031, 2, 128))
  mask = (normal((2, 1, 300, 1031), jnp.float32) > -1.0).at[0, 0, 3, :].set(False)
  for bias in (None, normal((1, 8, 300, 1031))):
    f = lambda q, k, v: jnp.sum(
      jaxdnn.dot_product_attention(q, k, v, bias=bias, mask=mask, implementation=IMPL).astype(
        jnp.float32
      )
    )
    jax.block_until_ready(jax.grad(f, argnums=(0, 1, 2))(q, k, v))


def head_dim_cases():
  """Head dims 96 and 192 on their own sm90 forwards (the second panel of 96
  zero-filled by TMA, stores clipped) and their gradients: dense persistent
  and uneven tiles, partial query and key blocks, GQA, the extended path
  with lengths; 192's backward with and without GQA (partials, or dK and dV
  stored by one consumer each)."""
  for dim, kv_heads, q_len in ((96, 2, 300), (96, 2, 600), (192, 2, 300), (192, 8, 300)):
    q = normal((2, q_len, 8, dim))
    k, v = normal((2, 1031, kv_heads, dim)), normal((2, 1031, kv_heads, dim))
    # (96 over 600 queries: the fused backward (JAXDNN_ATTENTION_SM90_BWD_FUSED_D96,
    # default on); both dQ modes with
    # JAXDNN_ATTENTION_SM90_BWD=2, which takes it at any length.)
    for kw in (
      dict(),
      dict(is_causal=True),
      dict(key_value_seq_lengths=jnp.array([1031, 517])),
      dict(deterministic=True),
    ):
      f = lambda q, k, v: jnp.sum(
        jaxdnn.dot_product_attention(q, k, v, implementation=IMPL, **kw).astype(jnp.float32)
      )
      # (their own backward kernels)
      jax.block_until_ready(jax.grad(f, argnums=(0, 1, 2))(q, k, v))
  # MLA: value's own columns on the dense forwards, 192/128 (and 128/64 under
  # JAXDNN_ATTENTION_SM90_VALUE_DIM_64=1): partial query tiles and key
  # blocks, GQA, causal and not.
  for dqk, dv in ((192, 128), (128, 64)):
    q, k, v = normal((2, 300, 8, dqk)), normal((2, 300, 2, dqk)), normal((2, 300, 2, dv))
    for causal in (False, True):
      f = lambda q, k, v: jnp.sum(
        jaxdnn.dot_product_attention(q, k, v, is_causal=causal, implementation=IMPL).astype(
          jnp.float32
        )
      )
      jax.block_until_ready(jax.grad(f, argnums=(0, 1, 2))(q, k, v))


def paged_cases():
  """paged_attention's in-place decode: shuffled tables, ragged and empty
  contexts, out-of-pool entries (clamped), block sizes 16 and 256, GQA."""
  for block, dim, q_len in ((16, 128, 1), (256, 64, 4), (64, 256, 16)):
    pool, max_blocks = 40, 12
    q = normal((3, q_len, 8, dim))
    kc, vc = normal((pool, block, 2, dim)), normal((pool, block, 2, dim))
    tables = jax.random.randint(next(key), (3, max_blocks), -2, pool + 3)
    lengths = jnp.array([0, block * max_blocks // 2 + 1, block * max_blocks + 9], jnp.int32)
    jax.block_until_ready(jaxdnn.paged_attention(q, kc, vc, tables, lengths, implementation=IMPL))


def main():
  if ONLY == "paged":
    paged_cases()
    print("memcheck smoke (paged): ALL PASSED")
    return
  if ONLY == "bias":
    bias_cases()
    print("memcheck smoke (bias): ALL PASSED")
    return
  if ONLY == "dims":
    head_dim_cases()
    print("memcheck smoke (dims): ALL PASSED")
    return
  if ONLY == "grouped":
    grouped_conv_cases()
    print("memcheck smoke (grouped): ALL PASSED")
    return
  if ONLY == "winograd":
    winograd_cases()
    print("memcheck smoke (winograd): ALL PASSED")
    return
  if ONLY == "cnn":
    cnn_cases()
    print("memcheck smoke (cnn): ALL PASSED")
    return
  for kw in attention_cases():
    f = lambda **a: jnp.sum(
      jaxdnn.dot_product_attention(**a, implementation=IMPL).astype(jnp.float32)
    )
    grads = jax.grad(lambda q, k, v: f(**(kw | dict(query=q, key=k, value=v))), argnums=(0, 1, 2))
    jax.block_until_ready(grads(kw["query"], kw["key"], kw["value"]))
  for width in (1024, 4097, 768):
    x, r = normal((300, width)), normal((300, width))
    scale = 1.0 + 0.1 * normal((width,), jnp.float32)
    for op in (jaxdnn.layer_norm, jaxdnn.rms_norm):
      loss = lambda x, s: jnp.sum(op(x, s, implementation=IMPL).astype(jnp.float32) ** 2)
      jax.block_until_ready(jax.grad(loss, argnums=(0, 1))(x, scale))
      res = lambda x, r: jnp.sum(op(x, residual=r, implementation=IMPL)[0].astype(jnp.float32))
      jax.block_until_ready(jax.grad(res, argnums=(0, 1))(x, r))
  for width in (1000, 4096, 16392, 131080, 4097):
    x = normal((3, width))
    where = jax.random.bernoulli(next(key), 0.8, x.shape)
    for op in (jaxdnn.softmax, jaxdnn.log_softmax):
      for w in (None, where):
        loss = lambda x: jnp.sum(jnp.sin(op(x, where=w, implementation=IMPL).astype(jnp.float32)))
        jax.block_until_ready(jax.grad(loss)(x))
    labels = jnp.array([0, width // 2, width - 1])
    loss = lambda x: jaxdnn.softmax_cross_entropy(
      x, labels, label_smoothing=0.1, implementation=IMPL
    )
    jax.block_until_ready(jax.grad(loss)(x))
  bias_cases()
  paged_cases()
  cnn_cases()
  rnn_cases()
  print("memcheck smoke: ALL PASSED")


def _grad_of(f, *args):
  loss = lambda *a: jnp.sum(jnp.sin(f(*a).astype(jnp.float32)))
  jax.block_until_ready(jax.grad(loss, argnums=tuple(range(len(args))))(*args))


def grouped_conv_cases():
  """The grouped tensor-core kernels (CUDA; the CPU runs its own): tail
  tiles, 8-32 channels a group, strides (the data gradient's input
  dilation), 1-D and 3-D, a bias gradient."""
  algo = dict(algorithm="direct") if IMPL == "cuda" else {}
  for xs, ws, groups, kw in (
    ((3, 13, 11, 64), (3, 3, 8, 64), 8, dict(padding="SAME")),
    ((2, 9, 12, 64), (3, 3, 16, 32), 4, dict(strides=2, padding=((1, 2), (0, 1)))),
    ((2, 50, 48), (5, 16, 48), 3, dict(kernel_dilation=2, padding="CAUSAL")),
    ((1, 5, 7, 6, 32), (3, 3, 3, 8, 32), 4, dict(padding="SAME")),
    ((2, 9, 9, 128), (3, 3, 32, 128), 4, dict(padding="SAME")),
  ):
    x, w, b = normal(xs), normal(ws) * 0.1, normal(ws[-1:])
    _grad_of(
      lambda x, w, b: jaxdnn.conv(
        x, w, b, feature_group_count=groups, activation="relu", implementation=IMPL, **algo, **kw
      ),
      x,
      w,
      b,
    )


def winograd_cases():
  """The Winograd forward (CUDA: transforms, batched GEMMs, output
  transform): tail tiles, the 16-byte and scalar input paths, groups, every
  dtype (float32 takes the 4x4 tile), a residual and float32 output."""
  for xs, ws, groups, dtype, kw in (
    ((3, 13, 11, 64), (3, 3, 64, 72), 1, jnp.bfloat16, dict(padding="SAME")),
    ((2, 7, 9, 10), (3, 3, 5, 6), 2, jnp.float16, dict(padding=((2, 0), (1, 1)))),
    ((2, 9, 10, 24), (3, 3, 24, 40), 1, jnp.float32, dict(padding="SAME")),
    (
      (1, 3, 6, 5, 16),
      (1, 3, 3, 16, 16),
      1,
      jnp.bfloat16,
      dict(preferred_element_type=jnp.float32),
    ),
  ):
    x, w, b = normal(xs, dtype), normal(ws, dtype) * 0.1, normal(ws[-1:])
    y = jaxdnn.conv(x, w, b, feature_group_count=groups, implementation="xla", **kw)
    r = normal(y.shape, y.dtype)
    jax.block_until_ready(
      jaxdnn.conv(
        x,
        w,
        b,
        residual=r,
        feature_group_count=groups,
        activation="gelu",
        algorithm="winograd",
        implementation=IMPL,
        **kw,
      )  # fmt: skip
    )


def cnn_cases():
  for c in (64, 13):
    x = normal((3, 17, 15, c))
    jax.block_until_ready(jaxdnn.max_pool(x, (3, 3), (2, 2), "SAME", implementation=IMPL))
    _grad_of(lambda x: jaxdnn.max_pool(x, (3, 3), (2, 2), "SAME", implementation=IMPL), x)
    _grad_of(
      lambda x: jaxdnn.avg_pool(
        x, (3, 3), (1, 1), ((1, 1), (1, 1)), count_include_pad=False, implementation=IMPL
      ),
      x,
    )
    _grad_of(lambda x: jaxdnn.global_avg_pool(x, implementation=IMPL), x)
    _grad_of(lambda x: jaxdnn.adaptive_avg_pool(x, (4, 5), implementation=IMPL), x)
  _grad_of(
    lambda x: jaxdnn.max_pool(x, (2, 3, 3), (1, 2, 2), "VALID", implementation=IMPL),
    normal((2, 5, 9, 9, 16)),
  )
  for xs, ws, kw in (
    ((4, 14, 14, 64), (3, 3, 64, 64), dict(padding="SAME")),
    ((4, 14, 14, 64), (1, 1, 64, 128), dict(strides=2)),
    ((2, 40, 32), (5, 32, 32), dict(padding="SAME")),
    ((2, 6, 8, 8, 16), (3, 3, 3, 16, 32), dict(padding="SAME")),
  ):
    x, w, b = normal(xs), normal(ws) * 0.1, normal(ws[-1:])
    _grad_of(
      lambda x, w, b: jaxdnn.conv(
        x, w, b, activation="relu", algorithm="implicit_gemm", implementation=IMPL, **kw
      ),
      x,
      w,
      b,
    )
  # The FFT convolution's mixing kernel: tiles past P and Q (batch 3, 6
  # output channels), groups, 2-D, a long 1-D window; forward and both
  # gradients (its three contractions).
  for xs, ws, kw in (
    ((3, 37, 6), (9, 6, 6), dict(padding="SAME")),
    ((1, 11, 13, 4), (5, 3, 2, 6), dict(feature_group_count=2, padding=((1, 3), (-1, 2)))),
    ((2, 500, 16), (200, 16, 8), dict(padding="CAUSAL")),
  ):
    x, w, b = normal(xs), normal(ws) * 0.1, normal(ws[-1:])
    _grad_of(
      lambda x, w, b: jaxdnn.conv(
        x, w, b, activation="gelu", algorithm="fft", implementation=IMPL, **kw
      ),
      x,
      w,
      b,
    )
  x, b = normal((300, 1000)), normal((1000,))
  _grad_of(lambda x, b: jaxdnn.bias_act(x, b, activation="gelu", implementation=IMPL), x, b)
  _grad_of(lambda x: jaxdnn.glu(x, activation="silu", implementation=IMPL), normal((300, 2048)))
  x, s = normal((4, 9, 9, 64)), 1.0 + 0.1 * normal((64,), jnp.float32)
  _grad_of(
    lambda x, s: jaxdnn.batch_norm(
      x, s, use_running_average=False, activation="relu", implementation=IMPL
    )[0],
    x,
    s,
  )
  _grad_of(lambda x, s: jaxdnn.group_norm(x, s, num_groups=8, implementation=IMPL), x, s)
  grouped_conv_cases()
  winograd_cases()


def rnn_cases():
  from jaxdnn.recurrent.layout import init_params

  for mode, hidden, dtype, bi in (
    ("lstm", 64, jnp.bfloat16, False),
    ("gru", 33, jnp.float32, True),
    ("lstm", 2048, jnp.bfloat16, False),
  ):
    params = init_params(next(key), mode, 16, hidden, num_layers=1, bidirectional=bi)
    x = normal((3, 5, 16), dtype)
    lengths = jnp.array([5, 0, 2])
    loss = lambda p, x: jnp.sum(
      jaxdnn.rnn(x, p, mode=mode, seq_lengths=lengths, implementation=IMPL)[0].astype(jnp.float32)
    )
    jax.block_until_ready(jax.grad(loss, argnums=(0, 1))(params, x))


if __name__ == "__main__":
  main()
