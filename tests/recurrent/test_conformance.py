"""jaxdnn.rnn under the conformance checks of tests/conformance.py: an LSTM,
a GRU and a tanh RNN, with per-example lengths and an initial state, batch
sharded over "data" (modes, layers, PyTorch/Flax layouts, dropout and errors
are in test_rnn.py).

The inputs are arrays only: x [batch, time, features] (batch-major, so the
batch is its leading axis), lengths [batch], the initial state h (and the
LSTM's c) [layers * directions, batch, hidden], then every direction's
w_ih, w_hh, b_ih, b_hh, which `fn` puts back into rnn's params tuple.
Parameters are float32; x and the state take the swept dtype (the op
computes in float32 and returns x's dtype).
"""

from typing import NamedTuple

import jax.numpy as jnp
from conformance import DTYPES, ConformanceSuite, OpSpec, Sharded, normal
from conftest import on_gpu
from jax.sharding import PartitionSpec as P

import jaxdnn
from jaxdnn.recurrent.layout import GATES


class Dims(NamedTuple):
  batch: int
  steps: int
  features: int
  hidden: int


# A batch of one, more steps than hidden units, and the other way round.
SHAPES = [Dims(3, 5, 4, 6), Dims(1, 7, 3, 2), Dims(2, 3, 6, 9)]
SMALL = Dims(3, 4, 3, 5)
SHARDED = Dims(8, 4, 3, 5)  # two examples per shard of the (4,) mesh


# Both sides compute in float32 (measured on the CPU kernel: 2e-7 forward,
# 6e-7 gradients); 16-bit results are those rounded once (one ulp). The CUDA
# kernel's float32 is CUDA's expf/tanhf and its own FMA order against XLA's
# approximations: a wider float32 bound on a GPU.
def tol(dtype):
  f32 = 3e-5 if on_gpu() else 2e-6
  return {"float32": f32, "bfloat16": 1e-2, "float16": 2e-3}[jnp.dtype(dtype).name]


def grad_tol(dtype):
  f32 = 1e-4 if on_gpu() else 1e-5
  return {"float32": f32, "bfloat16": 1e-2, "float16": 2e-3}[jnp.dtype(dtype).name]


# The input projection around the kernel is XLA's dot: run eagerly on its own
# and fused with the bias add under jit, cuBLAS may take another algorithm
# for it (a GPU GRU differed by 1e-7); the CPU gives the same bits.
def eager_jit_tol(dtype):
  return 1e-6 if on_gpu() and jnp.dtype(dtype) == jnp.float32 else 0


def rnn_spec(name, mode, *, layers, bidirectional, shapes=SHAPES, dtypes=DTYPES):
  lstm = mode == "lstm"
  n_state = 2 if lstm else 1
  dirs = 2 if bidirectional else 1

  def fn(x, lengths, *rest, implementation=None):
    state, flat = rest[:n_state], rest[n_state:]
    it = iter(flat)
    params = tuple(
      tuple(dict(w_ih=next(it), w_hh=next(it), b_ih=next(it), b_hh=next(it)) for _ in range(dirs))
      for _ in range(layers)
    )
    out, final = jaxdnn.rnn(
      x,
      params,
      mode=mode,
      seq_lengths=lengths,
      initial_state=tuple(state) if lstm else state[0],
      implementation=implementation,
    )
    return (out, *final) if lstm else (out, final)

  def make_inputs(rng, d, dtype):
    x = normal(rng, (d.batch, d.steps, d.features), dtype)
    lengths = jnp.asarray(rng.integers(1, d.steps + 1, d.batch), jnp.int32)
    state = tuple(
      normal(rng, (layers * dirs, d.batch, d.hidden), dtype, scale=0.5) for _ in range(n_state)
    )
    g = GATES[mode] * d.hidden
    flat = []
    for li in range(layers):
      fan_in = d.features if li == 0 else dirs * d.hidden
      for _ in range(dirs):
        for shape in ((fan_in, g), (d.hidden, g), (g,), (g,)):
          flat.append(normal(rng, shape, scale=0.5))
    return (x, lengths) + state + tuple(flat)

  batch_major, state_spec = P("data"), P(None, "data")
  n_params = 4 * layers * dirs
  return OpSpec(
    name=name,
    fn=fn,
    make_inputs=make_inputs,
    shapes=shapes,
    grad_shapes=shapes[:2],
    tol=tol,
    grad_tol=grad_tol,
    fwd_target="jaxdnn_rnn_fwd",
    bwd_target="jaxdnn_rnn_bwd",
    small_shape=SMALL,
    check_grads_shape=Dims(2, 3, 2, 3),
    dtypes=dtypes,
    data_argnums=tuple(range(2 + n_state)),  # x, lengths, the initial state
    eager_jit_tol=eager_jit_tol,
    sharded=Sharded(
      mesh_shape=(4,),
      axis_names=("data",),
      shape=SHARDED,
      in_specs=(batch_major, batch_major) + (state_spec,) * n_state + (P(),) * n_params,
      out_specs=(batch_major,) + (state_spec,) * n_state,
      bwd_all_reduce=True,  # the weight gradients sum over the batch
    ),
  )


class TestLstm(ConformanceSuite):
  spec = rnn_spec("rnn(lstm, bidirectional)", "lstm", layers=1, bidirectional=True)


# 16-bit x is cast to float32 on the way in and the results back on the way
# out, the same for every mode: the LSTM sweeps the dtypes, the others run
# float32 only (the suite's time on a 2-core machine).
F32 = (jnp.float32,)


class TestGru(ConformanceSuite):
  spec = rnn_spec("rnn(gru, 2 layers)", "gru", layers=2, bidirectional=False, dtypes=F32)


class TestRnnTanh(ConformanceSuite):
  spec = rnn_spec(
    "rnn(rnn_tanh)", "rnn_tanh", layers=1, bidirectional=False, shapes=SHAPES[:1], dtypes=F32
  )
