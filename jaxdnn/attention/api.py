"""Public dot_product_attention: a custom_vjp over the forward and backward primitives.

Arguments that jax.nn.dot_product_attention has keep its names, layouts and
meaning; the rest (segment ids, softcap, dropout, the log-sum-exp) follow
the usual flash-attention conventions. The mask rules are documented once,
in reference.py.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension, _platform
from jaxdnn._primitive import match_vma
from jaxdnn.attention import dropout, reference, validation
from jaxdnn.attention.primitives import (
  FORWARD_FIXED,
  OPERAND_BITS,
  attention_backward,
  attention_forward,
  plan_args,
)

_OP = "dot_product_attention"


@dataclasses.dataclass(frozen=True)
class _Config:
  scale: float
  softcap: float  # 0.0: none
  causal: bool
  window: tuple  # (left, right), -1 = unbounded
  dropout_rate: float
  implementation: str | None
  deterministic: bool
  with_lse: bool
  # CUDA runs head dims 96 and 192 natively forward (and 96 backward where
  # the plan says so): else the backward pads its operands to this width
  # (0: no padding).
  backward_width: int = 0
  # False when the bias is a boolean mask sent as 0 / -inf alone
  # (_mask_as_bias): the backward writes no dbias for it.
  bias_grad: bool = True

  def params(self, operands):
    return dict(
      operands=operands,
      scale=self.scale,
      softcap=self.softcap,
      causal=self.causal,
      window_left=self.window[0],
      window_right=self.window[1],
      dropout_rate=self.dropout_rate,
      implementation=self.implementation,
    )


def _operand_bits(bias, mask, q_len, kv_len, q_seg, seeds):
  bits = 0
  for name, x in (
    ("bias", bias),
    ("mask", mask),
    ("q_lengths", q_len),
    ("kv_lengths", kv_len),
    ("segments", q_seg),
    ("dropout", seeds),
  ):
    if x is not None:
      bits |= OPERAND_BITS[name]
  return bits


def _optionals(bias, mask, q_len, kv_len, q_seg, kv_seg, seeds):
  return [x for x in (bias, mask, q_len, kv_len, q_seg, kv_seg, seeds) if x is not None]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attention(cfg, q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, seeds, sinks):
  return _attention_fwd(cfg, q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, seeds, sinks)[0]


def _attention_fwd(cfg, q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, seeds, sinks):
  bits = _operand_bits(bias, mask, q_len, kv_len, q_seg, seeds)
  out, lse = attention_forward.bind(
    q, k, v, *_optionals(bias, mask, q_len, kv_len, q_seg, kv_seg, seeds), **cfg.params(bits)
  )
  if sinks is not None:
    out, lse = _with_sinks(out, lse, sinks)
  primal = (out, lse) if cfg.with_lse else out
  return primal, (q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, seeds, sinks, out, lse)


def _with_sinks(out, lse, sinks):
  """The kernels' output and lse with each head's sink logit added to every
  row's denominator: every probability of a row shrinks by one factor
  exp(lse - lse'), so the output does too (a row with no key: lse -inf,
  output 0, lse' = the sink)."""
  full = jnp.logaddexp(lse, sinks.astype(jnp.float32)[None, :, None])
  shrink = jnp.exp(lse - full)  # [B, N, T]
  scaled = out.astype(jnp.float32) * jnp.swapaxes(shrink, 1, 2)[..., None]
  return scaled.astype(out.dtype), full


def _sinks_grad(sinks, out, lse, dout, dlse):
  """d loss / d sinks[h] = sum over (b, t) of p_sink (dlse - D), with p_sink =
  exp(sink - lse) and D = rowsum(dout * out): a unit of sink moves the lse
  by p_sink and the output by -p_sink * out. The backward kernels need
  nothing new: given the final lse and output, their P and D already are
  the sink-normalized ones."""
  d = jnp.sum(dout.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)  # [B, T, N]
  p_sink = jnp.exp(sinks.astype(jnp.float32)[None, :, None] - lse)  # [B, N, T]
  g = -jnp.swapaxes(d, 1, 2)
  if dlse is not None:
    g = g + dlse
  return jnp.sum(p_sink * g, axis=(0, 2)).astype(sinks.dtype)


def _attention_bwd(cfg, saved, ct):
  q, k, v, bias, mask, q_len, kv_len, q_seg, kv_seg, seeds, sinks, out, lse = saved
  dout, dlse = ct if cfg.with_lse else (ct, None)
  bits = _operand_bits(bias, mask, q_len, kv_len, q_seg, seeds)
  if dlse is not None:
    bits |= OPERAND_BITS["dlse"]
  want_dbias = bias is not None and cfg.bias_grad
  if want_dbias:
    bits |= OPERAND_BITS["dbias"]
  dout = dout.astype(q.dtype)
  width = q.shape[-1]
  value_width = v.shape[-1]
  if value_width != width:
    # The forward ran value at its own head dim (MLA); the backward kernels
    # take one head dim: v, out and dout zero-padded (exact, as in the forward).
    v, out, dout = (_pad_head_dim(x, width) for x in (v, out, dout))
  if cfg.backward_width > width and not _native_head_dim("bwd", q, k, width, bits, cfg):
    q, k, v, out, dout = (_pad_head_dim(x, cfg.backward_width) for x in (q, k, v, out, dout))
  fixed = [q, k, v, out, lse, dout] + ([dlse] if dlse is not None else [])
  grads = attention_backward.bind(
    *fixed,
    *_optionals(bias, mask, q_len, kv_len, q_seg, kv_seg, seeds),
    deterministic=cfg.deterministic,
    **cfg.params(bits),
  )
  dq, dk, dv = (g[..., :width] for g in grads[:3])
  dv = dv[..., :value_width]
  # Inside shard_map a replicated bias or sinks gets its gradient summed over
  # the axes the data varies on (its own type), as JAX's autodiff would.
  dbias = match_vma(grads[3].astype(bias.dtype), bias) if want_dbias else None
  dsinks = None if sinks is None else match_vma(_sinks_grad(sinks, out, lse, dout, dlse), sinks)
  return dq, dk, dv, dbias, None, None, None, None, None, None, dsinks


_attention.defvjp(_attention_fwd, _attention_bwd)


# Head dims the CUDA kernels are built for; other head dims are zero-padded up
# (zeros change neither q.k nor the kept columns of the output).
CUDA_HEAD_DIMS = (64, 128, 256)


def cuda_supports(query, bias, mask) -> str | None:
  """Why the CUDA kernel cannot serve a call, or None when it can."""
  if not _extension.has_cuda_target("jaxdnn_attention_fwd"):
    return "this build has no CUDA attention kernel"
  if query.dtype not in (jnp.bfloat16, jnp.float16):
    return f"the CUDA kernel takes bfloat16 or float16, not {query.dtype}"
  if query.shape[2] > 65535:  # (batch past 65535 runs in pieces: primitives.SPLIT_LIMITS)
    return "the CUDA kernel takes at most 65535 heads"
  return None


@functools.partial(
  jax.jit, static_argnames=("scale", "is_causal", "window", "softcap", "dropout_rate", "with_lse")
)
def _xla_attention(
  q, k, v, bias, mask, q_lens, kv_lens, q_seg, kv_seg, seeds, sinks, *, with_lse, **static
):
  """The reference as one compiled call, returning only what the caller asked
  for: under jax.debug_infs a fully masked row's -inf logits and lse are
  intermediates then, as they are inside the kernels, not eager results."""
  out, lse = reference.attention(
    q,
    k,
    v,
    bias,
    mask,
    q_lengths=q_lens,
    kv_lengths=kv_lens,
    q_segment_ids=q_seg,
    kv_segment_ids=kv_seg,
    seeds=seeds,
    sinks=sinks,
    **static,
  )
  return out, (lse if with_lse else None)


def _padded_head_dim(head_dim):
  return next(d for d in CUDA_HEAD_DIMS if d >= head_dim)


def _plan_says(query, q, k, width, bits, cfg, bias=None, value_width=None):
  """The C++ plan query `attention_<query>` on q and k at head dim `width`
  (v taken as k's shape, at `value_width` columns where given) and `bias` (an
  aval, with the bias bit in `bits`)."""
  q_aval, k_aval = (jax.ShapeDtypeStruct(x.shape[:3] + (width,), x.dtype) for x in (q, k))
  v_aval = jax.ShapeDtypeStruct(k.shape[:3] + (value_width or width,), k.dtype)
  avals = [q_aval, k_aval, v_aval] + ([] if bias is None else [bias])
  args = plan_args(avals, FORWARD_FIXED, deterministic=cfg.deterministic, **cfg.params(bits))
  return bool(_extension.plan_query(f"attention_{query}", **args))


def _native_head_dim(direction, q, k, width, bits, cfg):
  """Whether CUDA runs head dim `width` (96, 192) unpadded in `direction`
  ("fwd" or "bwd"): the C++ plan's rule (plan.h, ForwardNativeHeadDim and
  BackwardNativeHeadDim; the backward's bits carry dlse and dbias)."""
  if width not in (96, 192) or bits & (OPERAND_BITS["bias"] | OPERAND_BITS["mask"]):
    return False
  return _plan_says(f"{direction}_native_head_dim", q, k, width, bits, cfg)


def _native_value_dim(q, k, width, value_width, bits, cfg):
  """Whether the CUDA forward takes value at its own `value_width` columns
  under a query/key head dim of `width` (MLA 192/128, 128/64 where switched
  on; plan.h, ForwardNativeValueDim), not zero-padded to `width`."""
  if value_width >= width or bits & (OPERAND_BITS["bias"] | OPERAND_BITS["mask"]):
    return False
  return _plan_says("fwd_native_value_dim", q, k, width, bits, cfg, value_width=value_width)


def _mask_as_bias(q, k, width, bias, mask, bits, cfg):
  """The mask as an additive 0 / -inf bias (summed into the caller's bias)
  where the C++ plan sends it to the sm90 bias kernels (plan.h, MaskAsBias),
  else None. A -inf logit is a masked pair to the kernels as to the oracle
  (for a finite score: an inf or NaN score at a masked pair gives NaN here,
  as in jax.nn's cuDNN path, where the oracle drops the pair), and its dS is
  zero, so the caller's dbias is unchanged. With a bias, only a mask that
  broadcasts into the bias's own shape: a larger sum would cost memory (an
  [1, N, T, S] bias with a [B, 1, 1, S] mask grows B-fold) and a dbias
  summed back in 16 bits."""
  if mask is None:
    return None
  if bias is not None and (
    bias.dtype not in (jnp.bfloat16, jnp.float16)
    or jnp.broadcast_shapes(mask.shape, bias.shape) != bias.shape
  ):
    return None
  dtype = q.dtype if bias is None else bias.dtype
  shape = mask.shape if bias is None else bias.shape
  bits = (bits & ~OPERAND_BITS["mask"]) | OPERAND_BITS["bias"]
  if not _plan_says("mask_as_bias", q, k, width, bits, cfg, jax.ShapeDtypeStruct(shape, dtype)):
    return None
  # -inf by design: eager calls under jax.debug_infs must not stop here
  # (the primitive's own results are guarded the same way).
  with jax.debug_infs(False), jax.debug_nans(False):
    blocked = jnp.where(mask, jnp.zeros((), dtype), jnp.array(-jnp.inf, dtype))
    return blocked if bias is None else bias + blocked


def _pad_head_dim(x, to):
  return x if x.shape[-1] == to else jnp.pad(x, [(0, 0)] * 3 + [(0, to - x.shape[-1])])


def _lengths_int32(x, size):
  """Valid lengths as the kernels read them: clamped to [0, size] (what the
  mask does with them anyway, cpp/attention/mask.h), so wider ints never wrap."""
  if np.dtype(x.dtype).itemsize <= 4 and np.dtype(x.dtype) != np.uint32:
    return x.astype(jnp.int32)
  return jnp.clip(x, 0, size).astype(jnp.int32)


def _segment_ids_int32(q_ids, kv_ids):
  """Segment ids as int32, preserving which ids are equal (all the mask reads).
  Ids of up to 32 bits are cast (a bijection); wider ones are replaced by
  their rank among the row's q and kv ids."""
  if np.dtype(q_ids.dtype).itemsize <= 4 and np.dtype(kv_ids.dtype).itemsize <= 4:
    return q_ids.astype(jnp.int32), kv_ids.astype(jnp.int32)
  both = jnp.concatenate([q_ids.astype(jnp.int64), kv_ids.astype(jnp.int64)], axis=1)
  ranks = jax.vmap(lambda row: jnp.searchsorted(jnp.sort(row), row))(both).astype(jnp.int32)
  return ranks[:, : q_ids.shape[1]], ranks[:, q_ids.shape[1] :]


def _to_4d(x):
  return None if x is None else jnp.reshape(x, (1,) * (4 - x.ndim) + x.shape)


def dot_product_attention(
  query,
  key,
  value,
  bias=None,
  mask=None,
  *,
  scale=None,
  is_causal=False,
  query_seq_lengths=None,
  key_value_seq_lengths=None,
  local_window_size=None,
  query_segment_ids=None,
  key_value_segment_ids=None,
  softcap=None,
  sinks=None,
  dropout_rate=0.0,
  dropout_rng=None,
  return_logsumexp=False,
  deterministic=False,
  implementation=None,
  return_residual=False,
):
  """Scaled dot-product attention, a drop-in for `jax.nn.dot_product_attention`.

  Args:
    query: [batch, q_len, heads, head_dim] (or without the batch dim).
    key, value: [batch, kv_len, kv_heads, head_dim]; kv_heads divides heads
      (GQA/MQA); value may have its own head dim (MLA: 192/128), which the
      output takes (the kernels run it zero-padded to the wider one).
    bias: additive logits bias, broadcastable to [batch, heads, q_len, kv_len]
      (rank < 4 gets leading 1s, as in jax.nn); differentiable.
    mask: bool, broadcastable like bias; True = attend.
    scale: logits scale; default 1 / sqrt(head_dim).
    is_causal: causal mask, aligned top-left when q_len >= kv_len (as
      jax.nn) and bottom-right when the query array is shorter than the
      key/value (using the valid lengths when given: decode, chunked prefill).
    query_seq_lengths, key_value_seq_lengths: int [batch] valid lengths.
    local_window_size: int or (left, right) keys on each side of the diagonal.
    query_segment_ids, key_value_segment_ids: int [batch, q_len] / [batch,
      kv_len]; a query attends only keys with its segment id (packed documents).
    softcap: logits become softcap * tanh(logits / softcap) (before bias).
    sinks: None or float [heads]: a logit per query head added to every
      row's softmax denominator (attention sinks, as in gpt-oss), taken as
      is (not scaled, capped or masked); differentiable. A row with no key
      then gives zeros and a log-sum-exp equal to its head's sink.
    dropout_rate, dropout_rng: dropout on the attention probabilities; the
      same key gives the same mask in the forward and the backward.
    return_logsumexp: also return the float32 log-sum-exp [batch, q_len,
      heads] of the logits (-inf for a query with no key); differentiable.
    deterministic: bit-identical gradients across runs on GPU (the CPU
      kernel always is).
    implementation: None (the kernel for the platform, else "xla" with a
      warning: float64, head dims over 256), "cuda" (also spelled "cudnn", as
      jax.nn names its fused GPU kernel), "cpu" or "xla" (plain JAX, the
      test oracle).
    return_residual: as jax.nn: also return the log-sum-exp [batch, q_len,
      heads] in query's dtype, not differentiated (-inf for a query with no
      key, where jax.nn gives a large negative number).

  A query row with no key to attend gives zeros. Returns the output in
  query's dtype and layout, then the residual and the log-sum-exp when asked.
  """
  query, key, value = (
    validation.as_array(n, x) for n, x in (("query", query), ("key", key), ("value", value))
  )
  if implementation == "cudnn":  # jax.nn's name for its fused GPU kernel
    implementation = "cuda"
  validation.check_qkv(query, key, value, allow_float64=implementation in (None, "xla"))
  is_causal = validation.check_flag("is_causal", is_causal)
  return_logsumexp = validation.check_flag("return_logsumexp", return_logsumexp)
  return_residual = validation.check_flag("return_residual", return_residual)
  deterministic = validation.check_flag("deterministic", deterministic)
  # What no kernel serves (resolve sends it to XLA with one warning).
  widest = max(query.shape[-1], value.shape[-1])
  uncovered = (
    f"{query.dtype} inputs"
    if query.dtype == jnp.float64
    else f"head_dim {widest} > {validation.MAX_HEAD_DIM}"
    if widest > validation.MAX_HEAD_DIM
    else None
  )
  unbatched = query.ndim == 3
  if unbatched:
    query, key, value = query[None], key[None], value[None]
    if query_segment_ids is not None:
      query_segment_ids = jnp.asarray(query_segment_ids)[None]
    if key_value_segment_ids is not None:
      key_value_segment_ids = jnp.asarray(key_value_segment_ids)[None]
  batch, q_len, heads, head_dim = query.shape
  kv_len = key.shape[1]
  full = (batch, heads, q_len, kv_len)
  bias = _to_4d(validation.as_array("bias", bias, optional=True))
  mask = _to_4d(validation.as_array("mask", mask, optional=True))
  if bias is not None and bias.dtype == jnp.float64 and query.dtype != jnp.float64:
    bias = bias.astype(jnp.float32)  # the kernels take float32 at most
  validation.check_broadcast("bias", bias, full, boolean=False)
  validation.check_broadcast("mask", mask, full, boolean=True)
  lengths = []
  for name, x in (
    ("query_seq_lengths", query_seq_lengths),
    ("key_value_seq_lengths", key_value_seq_lengths),
  ):
    x = validation.as_array(name, x, optional=True)
    validation.check_lengths(name, x, batch)
    lengths.append(None if x is None else _lengths_int32(x, q_len if name[0] == "q" else kv_len))
  q_len_arr, kv_len_arr = lengths
  q_seg = validation.as_array("query_segment_ids", query_segment_ids, optional=True)
  kv_seg = validation.as_array("key_value_segment_ids", key_value_segment_ids, optional=True)
  validation.check_segments(q_seg, kv_seg, batch, q_len, kv_len)
  if q_seg is not None:
    q_seg, kv_seg = _segment_ids_int32(q_seg, kv_seg)
  window = validation.window_sides(local_window_size)
  validation.check_scalars(scale, softcap, dropout_rate, dropout_rng)
  sinks = validation.check_sinks(validation.as_array("sinks", sinks, optional=True), heads)
  if sinks is not None and query.dtype != jnp.float64:
    sinks = sinks.astype(jnp.float32)
  scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
  rate = float(dropout_rate)
  seeds = dropout.seeds_from_rng(dropout_rng, batch) if rate > 0.0 else None
  impl = _platform.resolve(
    implementation, _OP, lambda: cuda_supports(query, bias, mask), no_kernel=uncovered
  )

  if impl == "xla":
    out, lse = _xla_attention(
      query,
      key,
      value,
      bias,
      mask,
      q_len_arr,
      kv_len_arr,
      q_seg,
      kv_seg,
      seeds,
      sinks,
      scale=scale,
      is_causal=bool(is_causal),
      window=None if window == (-1, -1) else window,
      softcap=None if softcap is None else float(softcap),
      dropout_rate=rate,
      with_lse=bool(return_logsumexp or return_residual),
    )
  else:
    run_on_cuda = impl == "cuda" or (impl is None and jax.default_backend() == "gpu")
    # The kernels take one head dim: a narrower value (MLA: 192/128) or
    # query/key is zero-padded to the wider, exactly (zero columns of v give
    # zero output columns, dropped below; zero columns of q and k add
    # nothing to q.k); CUDA pads on to the head dims it is built for.
    value_dim = value.shape[-1]
    width = max(head_dim, value_dim)
    cfg = _Config(
      scale=scale,
      softcap=float(softcap or 0.0),
      causal=bool(is_causal),
      window=window,
      dropout_rate=rate,
      implementation=impl,
      deterministic=bool(deterministic),
      with_lse=return_logsumexp or return_residual,
    )
    own_value = False  # value at its own head dim in the forward (MLA), not padded
    if run_on_cuda:
      padded = _padded_head_dim(width)
      bits = _operand_bits(bias, mask, q_len_arr, kv_len_arr, q_seg, seeds)
      if padded != width and _native_head_dim("fwd", query, key, width, bits, cfg):
        cfg = dataclasses.replace(cfg, backward_width=padded)
      else:
        width = padded
      own_value = _native_value_dim(query, key, width, value_dim, bits, cfg)
      as_bias = _mask_as_bias(query, key, width, bias, mask, bits, cfg)
      if as_bias is not None:
        cfg = dataclasses.replace(cfg, bias_grad=bias is not None)
        bias, mask = as_bias, None
    q_in, k_in = (_pad_head_dim(x, width) for x in (query, key))
    v_in = value if own_value else _pad_head_dim(value, width)
    res = _attention(
      cfg, q_in, k_in, v_in, bias, mask, q_len_arr, kv_len_arr, q_seg, kv_seg, seeds, sinks
    )
    out, lse = res if cfg.with_lse else (res, None)
    out = out[..., :value_dim]
  if unbatched:
    out = out[0]
  if not (return_logsumexp or return_residual):
    return out
  lse = jnp.swapaxes(lse, -1, -2)  # [batch, heads, q_len] -> [batch, q_len, heads]
  lse = lse[0] if unbatched else lse
  results = (out,)
  if return_residual:
    results += (jax.lax.stop_gradient(lse).astype(out.dtype),)
  if return_logsumexp:
    results += (lse,)
  return results
