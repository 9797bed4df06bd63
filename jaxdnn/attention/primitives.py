"""The attention family's two primitives, forward and backward, on the FfiOp base.

Operand order matches cpp/attention/attention_decode.cc:
  forward:  q, k, v, [bias], [mask], [q_lengths], [kv_lengths],
            [q_segment_ids, kv_segment_ids], [seeds]          -> out, lse, [workspace]
  backward: q, k, v, out, lse, dout, [dlse], then the forward's optional
            operands                                          -> dq, dk, dv, [dbias]
`operands` (bits of OPERAND_BITS) says which optional operands are present.
Every operand's first axis is the batch, which is what the batching rule
folds vmapped axes into.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension
from jaxdnn._primitive import FfiOp, batch_size, not_mapped, to_front
from jaxdnn.attention import reference
from jaxdnn.attention.sharding import BatchHeadsSharding

OPERAND_BITS = dict(bias=1, mask=2, q_lengths=4, kv_lengths=8, segments=16, dropout=32,
                    dlse=64, dbias=128)

FORWARD_FIXED = ("q", "k", "v")
BACKWARD_FIXED = ("q", "k", "v", "out", "lse", "dout")


def operand_kinds(fixed, operands: int) -> tuple:
  kinds = list(fixed)
  if fixed is BACKWARD_FIXED and operands & OPERAND_BITS["dlse"]:
    kinds.append("dlse")
  for name in ("bias", "mask", "q_lengths", "kv_lengths"):
    if operands & OPERAND_BITS[name]:
      kinds.append(name)
  if operands & OPERAND_BITS["segments"]:
    kinds += ["q_segment_ids", "kv_segment_ids"]
  if operands & OPERAND_BITS["dropout"]:
    kinds.append("seeds")
  return tuple(kinds)


def _shaped(shape, dtype):
  return jax.core.ShapedArray(tuple(shape), np.dtype(dtype))


def _attrs(operands, scale, softcap, causal, window_left, window_right, dropout_rate):
  return dict(operands=np.int32(operands), scale=np.float32(scale), softcap=np.float32(softcap),
              causal=np.int32(causal), window_left=np.int32(window_left),
              window_right=np.int32(window_right), dropout_rate=np.float32(dropout_rate))


def _fold_batch(args, dims, kinds, expand_bias: bool):
  """Moves vmapped axes to the front and merges them into the batch axis.

  Unbatched operands are broadcast along the vmapped axis, except a bias or
  mask that broadcasts over the batch (size 1), which can stay as it is in
  the forward. Returns the new operands, the vmap size and the batch size.
  """
  size = batch_size(args, dims)
  q = to_front(args[0], dims[0], size)
  batch = q.shape[1]
  new = []
  for a, d, kind in zip(args, dims, kinds):
    keep_broadcast = (kind == "mask" or (kind == "bias" and not expand_bias))
    if d is not_mapped and keep_broadcast and a.shape[0] == 1:
      new.append(a)
      continue
    x = to_front(a, d, size)
    if kind in ("bias", "mask") and x.shape[1] == 1 and batch != 1:
      x = jnp.broadcast_to(x, (size, batch) + x.shape[2:])
    new.append(x.reshape((size * x.shape[1],) + x.shape[2:]))
  return new, size, batch


def _unfold(x, size):
  return x.reshape((size, x.shape[0] // size) + x.shape[1:])


class AttentionForward(FfiOp):
  name = "jaxdnn_attention_fwd"
  target = "jaxdnn_attention_fwd"

  def abstract_eval(self, q, *rest, **params):
    batch, q_len, heads, _ = q.shape
    return [_shaped(q.shape, q.dtype), _shaped((batch, heads, q_len), jnp.float32)]

  def ffi_attributes(self, *, implementation, **params):
    return _attrs(**params)

  def workspace(self, platform, avals_in, *, operands, dropout_rate, causal=False,
                window_left=-1, window_right=-1, **params):
    """CUDA: the split-KV decode path's float32 partials, only where that path
    may run (a decode-shaped problem, JAXDNN_ATTENTION_DECODE not 0), and the
    sm90 forward's dynamic tile counter (its first element) where the tiles are
    uneven, and its segment ranges after it (sm90_forward_workspace_elems); the
    two paths never run in one call, so one buffer of the larger size serves both. Dense non-causal prefill and
    training calls allocate nothing extra."""
    if platform != "cuda" or not _extension.has_cuda_target(self.target):
      return []
    q, k = avals_in[0], avals_in[1]
    batch, q_len, heads, dim = q.shape
    elems = sm90_forward_workspace_elems(q.dtype, dim, operands, dropout_rate, causal, window_left,
                                         window_right, batch, q_len, k.shape[1])
    if (_decode_split_enabled() and dropout_rate == 0.0
        and not operands & (OPERAND_BITS["bias"] | OPERAND_BITS["mask"]
                            | OPERAND_BITS["segments"] | OPERAND_BITS["dropout"])
        and np.dtype(q.dtype) in (np.dtype(jnp.bfloat16), np.dtype(jnp.float16))):
      elems = max(elems, decode_split_workspace_elems(batch, q_len, k.shape[1], heads, k.shape[2],
                                                      dim))
    return [jax.ShapeDtypeStruct((elems,), jnp.float32)] if elems > 0 else []

  def sharding(self, avals_in, avals_out, *, operands, dropout_rate, **_):
    kinds = operand_kinds(FORWARD_FIXED, operands)
    return BatchHeadsSharding(kinds, ("out", "lse"), tuple(a.shape for a in avals_in),
                              reduces_bias=False)

  def batch(self, args, dims, **params):
    kinds = operand_kinds(FORWARD_FIXED, params["operands"])
    new, size, _ = _fold_batch(args, dims, kinds, expand_bias=False)
    outs = self.bind(*new, **params)
    return [_unfold(o, size) for o in outs], [0, 0]


class AttentionBackward(FfiOp):
  name = "jaxdnn_attention_bwd"
  target = "jaxdnn_attention_bwd"

  def abstract_eval(self, q, k, v, *rest, operands, **params):
    outs = [_shaped(q.shape, q.dtype), _shaped(k.shape, k.dtype), _shaped(v.shape, v.dtype)]
    if operands & OPERAND_BITS["dbias"]:
      kinds = operand_kinds(BACKWARD_FIXED, operands)
      bias = (q, k, v) + rest
      bias = bias[kinds.index("bias")]
      outs.append(_shaped(bias.shape, jnp.float32))
    return outs

  def ffi_attributes(self, *, implementation, deterministic, **params):
    return dict(_attrs(**params), deterministic=np.int32(deterministic))

  def workspace(self, platform, avals_in, *, operands, **params):
    """CUDA: float32 delta [B, N, Sq], per-query-head dK and dV partials
    [B, Sk, N, D] each, and a full-size dbias staging area when the bias
    broadcasts (cpp/attention/attention_cuda_kernels.h: BackwardWorkspaceElems)."""
    if platform != "cuda" or not _extension.has_cuda_target(self.target):
      return []
    q, k = avals_in[0], avals_in[1]
    batch, q_len, heads, dim = q.shape
    kv_len = k.shape[1]
    elems = batch * heads * q_len + 2 * batch * kv_len * heads * dim
    if operands & OPERAND_BITS["dbias"]:
      bias = avals_in[operand_kinds(BACKWARD_FIXED, operands).index("bias")]
      if tuple(bias.shape) != (batch, heads, q_len, kv_len):
        elems += batch * heads * q_len * kv_len
    if (_fused_backward_applies(dim, q_len, kv_len, operands, **params)
        and _may_take_fused_backward(q_len, params.get("deterministic", True))):
      # The fused Hopper backward also keeps a float32 dQ accumulator and
      # semaphores (attention_sm90_backward_fused.h: Sm90FusedBwdWorkspaceElems).
      elems = max(elems, _fused_backward_workspace(batch, q_len, kv_len, heads, k.shape[2], dim))
    return [jax.ShapeDtypeStruct((max(elems, 1),), jnp.float32)]

  def fallback(self, platform, **params):
    if platform == "cuda" and not _extension.has_cuda_target(self.target):
      return lambda *args: _composed_backward(*args, **params)
    return None

  def sharding(self, avals_in, avals_out, *, operands, **_):
    kinds = operand_kinds(BACKWARD_FIXED, operands)
    outs = ("dq", "dk", "dv") + (("dbias",) if operands & OPERAND_BITS["dbias"] else ())
    return BatchHeadsSharding(kinds, outs, tuple(a.shape for a in avals_in), reduces_bias=True)

  def batch(self, args, dims, **params):
    # dbias must come out per vmapped element, so the bias is expanded to the
    # full batch and its gradient summed back to the bias's batch size.
    kinds = operand_kinds(BACKWARD_FIXED, params["operands"])
    new, size, batch = _fold_batch(args, dims, kinds, expand_bias=True)
    outs = [_unfold(o, size) for o in self.bind(*new, **params)]
    if params["operands"] & OPERAND_BITS["dbias"]:
      i = kinds.index("bias")
      bias_shape = [n for ax, n in enumerate(args[i].shape) if ax != dims[i]]
      if bias_shape[0] == 1 and batch != 1:
        outs[3] = jnp.sum(outs[3], axis=1, keepdims=True)
    return outs, [0] * len(outs)


def _composed_backward(*args, operands, scale, softcap, causal, window_left, window_right,
                       dropout_rate, implementation, deterministic):
  """The backward as a plain-JAX vjp of the reference (used where no kernel exists yet)."""
  named = dict(zip(operand_kinds(BACKWARD_FIXED, operands), args))
  window = None if (window_left, window_right) == (-1, -1) else (window_left, window_right)
  has_bias = "bias" in named

  def forward(q, k, v, bias):
    return reference.attention(
        q, k, v, bias, named.get("mask"), scale=scale, is_causal=causal, window=window,
        q_lengths=named.get("q_lengths"), kv_lengths=named.get("kv_lengths"),
        q_segment_ids=named.get("q_segment_ids"), kv_segment_ids=named.get("kv_segment_ids"),
        softcap=softcap or None, dropout_rate=dropout_rate, seeds=named.get("seeds"))

  _, vjp = jax.vjp(forward, named["q"], named["k"], named["v"], named.get("bias"))
  dlse = named.get("dlse", jnp.zeros_like(named["lse"]))
  dq, dk, dv, dbias = vjp((named["dout"], dlse))
  grads = [dq, dk, dv]
  if operands & OPERAND_BITS["dbias"] and has_bias:
    grads.append(dbias.astype(jnp.float32))
  return grads


attention_forward = AttentionForward()
attention_backward = AttentionBackward()


# From this many query rows up the CUDA backward takes the fused Hopper kernel:
# deterministic=True (dQ added in key-block order) and deterministic=False
# (unordered dQ). Mirrors kFusedBackwardMinQueryLen and
# kFusedBackwardUnorderedMinQueryLen in cpp/attention/attention_cuda_kernels.cu.
FUSED_BACKWARD_MIN_QUERY_LEN = 8192
FUSED_BACKWARD_UNORDERED_MIN_QUERY_LEN = 512


# Optional operands the fused Hopper backward never takes (of the masks it
# takes segment ids alone).
_FUSED_BACKWARD_REFUSES = sum(OPERAND_BITS[n] for n in (
    "bias", "mask", "q_lengths", "kv_lengths", "dropout", "dlse", "dbias"))


def _fused_backward_applies(dim, q_len, kv_len, operands, *, softcap=0.0, causal=False,
                            window_left=-1, window_right=-1, **_):
  """The problems the fused kernel can take at all (attention_sm90_backward_fused.cu:
  Sm90FusedBackwardSupports): dense or segment ids only, head dim 64/128,
  causal only when q_len == kv_len; elsewhere its workspace would be asked for
  in vain."""
  return (dim in (64, 128) and not operands & _FUSED_BACKWARD_REFUSES and not softcap
          and window_left < 0 and window_right < 0 and (not causal or q_len == kv_len))


def _may_take_fused_backward(q_len, deterministic=True):
  """Whether the CUDA backward may pick the fused Hopper kernel, by the same
  rule as the C++ side (JAXDNN_ATTENTION_SM90_BWD: 0/1 never, 2 always; by
  default from FUSED_BACKWARD_MIN_QUERY_LEN rows, or from
  FUSED_BACKWARD_UNORDERED_MIN_QUERY_LEN rows for deterministic=False unless
  JAXDNN_ATTENTION_SM90_BWD_ATOMIC=0 turns its unordered dQ mode off), the
  same at head dims 64 and 128."""
  mode = os.environ.get("JAXDNN_ATTENTION_SM90_BWD")
  if mode in ("0", "1"):
    return False
  unordered = not deterministic and os.environ.get("JAXDNN_ATTENTION_SM90_BWD_ATOMIC") != "0"
  threshold = FUSED_BACKWARD_UNORDERED_MIN_QUERY_LEN if unordered else FUSED_BACKWARD_MIN_QUERY_LEN
  return mode == "2" or q_len >= threshold


def _fused_backward_workspace(batch, q_len, kv_len, heads, kv_heads, dim):
  """float32 elements of the fused sm90 backward's workspace (mirrors the C++)."""
  round64 = lambda x: -(-x // 64) * 64
  # 64-row dQ blocks; head dim 128 also covers the 80-query-step variant
  # (bit 128): ceil(q_len / 80) * 80 rows (Sm90FusedBwdDqBlocks).
  rows = -(-q_len // 80) * 80 if dim == 128 else q_len
  num_m = -(-rows // 64)
  # delta, dQ accumulator, semaphores, segment id ranges per query step, per
  # 128-key block and of the 80 queries from every multiple of 16 (the
  # 80-query segment path, JAXDNN_ATTENTION_SM90_BWD_Q80_SEG).
  n = (round64(batch * heads * q_len) + batch * heads * num_m * 64 * dim
       + round64(batch * heads * num_m) + round64(2 * batch * num_m)
       + round64(2 * batch * -(-kv_len // 128)) + round64(2 * batch * -(-q_len // 16)))
  if heads != kv_heads:
    n += 2 * batch * kv_len * heads * dim
  return n


# ---- the sm90 forward's dynamic tile scheduler (cpp/attention/hopper) ----
# float32 elements the forward's workspace holds for the claim counter (one
# int32 is used; 256 bytes keep the buffer's start aligned for anything else).
SM90_TILE_COUNTER_ELEMS = 64


def sm90_segment_range_elems(batch, q_len, kv_len):
  """int32 elements of the sm90 forward's segment ranges: an (min, max) pair
  per 64 keys and per 64 query rows, two groups per 128 (mirrors
  SegmentRangeInts in cpp/attention/hopper/sm90_segment_ranges.cuh)."""
  groups = lambda n: 2 * (-(-n // 128))
  return 2 * batch * (groups(q_len) + groups(kv_len))


def sm90_forward_workspace_elems(dtype, dim, operands, dropout_rate, causal, window_left,
                                 window_right, batch, q_len, kv_len):
  """Workspace elements for the sm90 forward, 0 where it cannot be used:
  bf16/f16, head dim 64/128/256, no bias/mask/dropout, and uneven tiles
  (causal, a window, segment ids), as `uneven` in LaunchAttentionFwdSm90Variant
  (cpp/attention/hopper/attention_sm90_forward.cu). The dynamic tile counter
  takes the first 256 bytes whatever JAXDNN_ATTENTION_SM90_DYNAMIC says (the
  C++ side reads it; the kernel takes the scheduler only where one is
  present); with segment ids their ranges follow, which the forward's
  producer votes from (the C++ side refuses segment ids without that room)."""
  if np.dtype(dtype) not in (np.dtype(jnp.bfloat16), np.dtype(jnp.float16)):
    return 0
  if dim not in (64, 128, 256) or dropout_rate != 0.0:
    return 0
  if operands & (OPERAND_BITS["bias"] | OPERAND_BITS["mask"] | OPERAND_BITS["dropout"]):
    return 0
  uneven = (bool(causal) or window_left >= 0 or window_right >= 0
            or bool(operands & OPERAND_BITS["segments"]))
  if not uneven:
    return 0
  if operands & OPERAND_BITS["segments"]:
    return SM90_TILE_COUNTER_ELEMS + sm90_segment_range_elems(batch, q_len, kv_len)
  return SM90_TILE_COUNTER_ELEMS


# ---- the split-KV decode forward (cpp/attention/decode) ----
# Mirrors of cpp/attention/decode/attention_decode_split_plan.h: change both together.
DECODE_WARPS = 4
DECODE_MAX_QUERY_LEN = 16
DECODE_CHUNK_ALIGN = 64
DECODE_MIN_CHUNK = 512
DECODE_TARGET_CTAS = 1024


def _decode_split_enabled():
  """The decode path is on unless JAXDNN_ATTENTION_DECODE=0; the C++ side
  reads the same variable at first use."""
  return os.environ.get("JAXDNN_ATTENTION_DECODE") != "0"


def _ceil_div(a, b):
  return -(-a // b)


def _decode_split_plan(batch, q_len, kv_len, heads, kv_heads):
  """(slots per output row, splits): mirrors MakeDecodeSplitPlan."""
  rows = q_len * (heads // max(kv_heads, 1))
  row_tiles = 1 if rows <= 16 else (2 if rows <= 32 else 4)
  key_groups = DECODE_WARPS // row_tiles
  row_groups = _ceil_div(rows, 16 * row_tiles)
  base_ctas = batch * kv_heads * row_groups
  kv = max(kv_len, 1)
  splits = _ceil_div(DECODE_TARGET_CTAS, base_ctas) if base_ctas > 0 else 1
  splits = max(1, min(splits, _ceil_div(kv, DECODE_MIN_CHUNK)))
  chunk = _ceil_div(_ceil_div(kv, splits), DECODE_CHUNK_ALIGN) * DECODE_CHUNK_ALIGN
  splits = _ceil_div(kv, chunk)
  return splits * key_groups, splits


def decode_split_workspace_elems(batch, q_len, kv_len, heads, kv_heads, dim):
  """float32 workspace elements of the decode path, 0 where the shape does not
  take it: mirrors DecodeWorkspaceElems (DecodeSplitShapeFits, then
  batch * heads * q_len * slots * (dim + 2))."""
  if batch < 1 or not 1 <= q_len <= DECODE_MAX_QUERY_LEN or kv_len < 1:
    return 0
  if heads < 1 or kv_heads < 1 or heads % kv_heads != 0 or dim not in (64, 128, 256):
    return 0
  slots, splits = _decode_split_plan(batch, q_len, kv_len, heads, kv_heads)
  if splits < 2:
    return 0
  return batch * heads * q_len * slots * (dim + 2)
