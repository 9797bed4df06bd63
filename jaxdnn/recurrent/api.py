"""jaxdnn.recurrent: LSTM, GRU and the plain tanh/ReLU RNN, multi-layer,
bidirectional, with per-example lengths (PyTorch's packed-sequence
semantics), in jaxdnn.recurrent.layout's weight layout.

Every step's input projection runs as one GEMM (XLA's dot); the recurrence
of each direction of each layer is a primitive pair (forward, backward)
tied by custom_vjp, with a C++ CPU kernel and a persistent CUDA kernel
(cpp/recurrent/sm80: every step on the GPU's SMs at once, the recurrent
weights resident in shared memory where they fit, in the model's precision).
The recurrent weights' gradients are one GEMM over all steps.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _platform
from jaxdnn._primitive import match_vma, vma_token
from jaxdnn.recurrent.layer_xla import weight_grads
from jaxdnn.recurrent.layout import check_mode
from jaxdnn.recurrent.primitives import cuda_plan_bytes, rnn_backward, rnn_forward
from jaxdnn.recurrent.reference import _direction, _reverse_valid, check_call, run_layers


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _layer(mode, implementation, grad_dtype, gx, w_hh, b_hh, h0, c0, lengths):
  out, h_n, c_n, _, _ = rnn_forward.bind(
    gx,
    w_hh,
    b_hh,
    h0,
    c0,
    lengths,
    mode=mode,
    weights=_weights(grad_dtype),
    implementation=implementation,
  )
  return out, h_n, c_n


def _layer_fwd(mode, implementation, grad_dtype, gx, w_hh, b_hh, h0, c0, lengths):
  out, h_n, c_n, saved, c_seq = rnn_forward.bind(
    gx,
    w_hh,
    b_hh,
    h0,
    c0,
    lengths,
    mode=mode,
    weights=_weights(grad_dtype),
    implementation=implementation,
  )
  return (out, h_n, c_n), (w_hh, h0, c0, lengths, out, saved, c_seq, vma_token(b_hh))


def _layer_bwd(mode, implementation, grad_dtype, res, cts):
  w_hh, h0, c0, lengths, out, saved, c_seq, b_token = res
  dout, dh_n, dc_n = cts
  dgx, dh0, dc0 = rnn_backward.bind(
    dout,
    dh_n,
    dc_n,
    w_hh,
    h0,
    c0,
    lengths,
    out,
    saved,
    c_seq,
    mode=mode,
    weights=_weights(grad_dtype),
    implementation=implementation,
  )
  dw, db = weight_grads(mode, dgx, h0, out, saved, grad_dtype, w_hh)
  # Inside shard_map the weights and initial states may be replicated while
  # the data varies: their gradients are summed to the primals' types.
  dw, db = match_vma(dw, vma_token(w_hh)), match_vma(db, b_token)
  dh0, dc0 = match_vma(dh0, vma_token(h0)), match_vma(dc0, vma_token(c0))
  return dgx, dw, db, dh0, dc0, np.zeros(lengths.shape, jax.dtypes.float0)


_layer.defvjp(_layer_fwd, _layer_bwd)


def _weights(dtype):
  """The CUDA kernels' recurrent weight precision: the model's."""
  return jnp.dtype(dtype).name


def rnn(
  x,
  params,
  *,
  mode="lstm",
  num_layers=None,
  bidirectional=None,
  seq_lengths=None,
  initial_state=None,
  dropout_rate=0.0,
  dropout_rng=None,
  time_major=False,
  implementation=None,
):
  """A recurrent stack over x [batch, time, features] ([time, batch, ...]
  with time_major).

  Args:
    params: a tuple over layers of a tuple over directions of dicts w_ih,
      w_hh, b_ih, b_hh (jaxdnn.recurrent.layout; converters from PyTorch and Flax).
    mode: "lstm", "gru" (cuDNN's and PyTorch's formulation), "rnn_tanh",
      "rnn_relu".
    num_layers, bidirectional: optional checks against params' structure.
    seq_lengths: [batch] integers: steps at or past an example's length leave
      its state alone and output zeros; the reverse direction starts at its
      last valid step.
    initial_state: h [layers * directions, batch, hidden] (LSTM: (h, c)).
    dropout_rate, dropout_rng: dropout on the outputs of every layer but the
      last (PyTorch's), with rate > 0 requiring a key.
    implementation: None, "cpu", "cuda" or "xla".

  Returns:
    outputs [batch, time, directions * hidden] in x's dtype, and the final
    state h [layers * directions, batch, hidden] (LSTM: (h, c)), PyTorch's
    order (layer-major, forward before reverse).
  """
  check_mode(mode)
  xs, lengths, init, dirs = check_call(x, params, mode, seq_lengths, initial_state, time_major)
  if num_layers is not None and num_layers != len(params):
    raise ValueError(f"rnn: num_layers={num_layers} but params hold {len(params)} layers")
  if bidirectional is not None and bool(bidirectional) != (dirs == 2):
    raise ValueError(
      f"rnn: bidirectional={bidirectional} but params hold {dirs} direction(s) per layer"
    )
  rate = float(dropout_rate)
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"rnn: dropout_rate must be in [0, 1), got {dropout_rate}")
  if rate > 0.0 and dropout_rng is None:
    raise ValueError("rnn: dropout_rate > 0 needs dropout_rng")
  no_kernel = "a float64 x" if x.dtype == jnp.float64 else None
  # The model's 16-bit dtype, or float32: the GPU keeps the recurrent weights
  # in it and the weight gradients' GEMM takes it as operands (as cuDNN
  # does); float32 models multiply in float32 at full precision.
  grad_dtype = jnp.dtype(x.dtype) if x.dtype in (jnp.bfloat16, jnp.float16) else jnp.float32

  def cuda_unsupported():
    hidden = params[0][0]["w_hh"].shape[0]
    batch = xs.shape[1]
    for backward in (False, True):
      if cuda_plan_bytes(xs.shape[0], batch, hidden, backward, mode, _weights(grad_dtype)) < 0:
        return f"no CUDA recurrence plan for hidden size {hidden}"
    return None

  impl = _platform.resolve(
    implementation, "rnn", cuda_unsupported=cuda_unsupported, no_kernel=no_kernel
  )

  def direction(layer_in, p, carry0, reverse):
    if impl == "xla":
      return _direction(layer_in, p, mode, lengths, carry0, reverse)
    seq = _reverse_valid(layer_in, lengths) if reverse else layer_in
    gx = seq @ p["w_ih"] + p["b_ih"]  # every step's input projection at once
    c0 = carry0[1] if mode == "lstm" else jnp.zeros((0,), jnp.float32)
    out, h_n, c_n = _layer(mode, impl, grad_dtype, gx, p["w_hh"], p["b_hh"], carry0[0], c0, lengths)
    if reverse:
      out = _reverse_valid(out, lengths)
    return out, ((h_n, c_n) if mode == "lstm" else (h_n,))

  def between(li, out):
    if rate == 0.0:
      return out
    keep = jax.random.bernoulli(jax.random.fold_in(dropout_rng, li), 1.0 - rate, out.shape)
    return jnp.where(keep, out / (1.0 - rate), 0.0)

  out, finals = run_layers(xs, params, mode, lengths, init, dirs, direction, between)
  out = out.astype(x.dtype)
  out = out if time_major else jnp.swapaxes(out, 0, 1)
  states = tuple(jnp.stack(f).astype(x.dtype) for f in finals)
  return out, (states if mode == "lstm" else states[0])
