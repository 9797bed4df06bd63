"""Trace-time checks of dot_product_attention's arguments, naming the argument."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

MAX_HEAD_DIM = 256
F32 = np.finfo(np.float32)


def _err(msg):
  return ValueError(f"dot_product_attention: {msg}")


def as_array(name, x, *, optional=False):
  """x as a jax array; a clear error naming the argument when it is not array-like."""
  if x is None and optional:
    return None
  if isinstance(x, (str, bytes, dict, set)) or x is None or callable(x):
    raise TypeError(f"dot_product_attention: {name} must be an array, got {type(x).__name__}")
  try:
    return jnp.asarray(x)
  except (TypeError, ValueError) as e:
    raise TypeError(
      f"dot_product_attention: {name} must be an array, got {type(x).__name__}"
    ) from e


def check_qkv(query, key, value, *, allow_float64=False):
  floats = (jnp.float32, jnp.bfloat16, jnp.float16) + ((jnp.float64,) if allow_float64 else ())
  for name, x in (("query", query), ("key", key), ("value", value)):
    if x.ndim not in (3, 4):
      raise _err(
        f"{name} must be [batch, seq, heads, head_dim] or [seq, heads, head_dim], "
        f"got shape {x.shape}"
      )
    if x.dtype not in floats:
      raise _err(f"{name} must be float32, bfloat16 or float16, got {x.dtype}")
  if not query.ndim == key.ndim == value.ndim:
    raise _err(
      f"query, key and value must have the same rank, got {query.shape}, {key.shape}, {value.shape}"
    )
  if key.shape[:-1] != value.shape[:-1]:
    raise _err(
      f"value must have key's shape but for its head dim, {key.shape[:-1]} + (any,), "
      f"got {value.shape}"
    )
  if not query.dtype == key.dtype == value.dtype:
    raise _err(
      f"query, key and value must share a dtype, got {query.dtype}, {key.dtype}, {value.dtype}"
    )
  if query.ndim == 4 and query.shape[0] != key.shape[0]:
    raise _err(f"query batch {query.shape[0]} != key batch {key.shape[0]}")
  if query.shape[-1] != key.shape[-1]:
    raise _err(f"query head_dim {query.shape[-1]} != key head_dim {key.shape[-1]}")
  if query.shape[-1] == 0:
    raise _err("head_dim (the last axis of query, key and value) must be at least 1, got 0")
  if value.shape[-1] == 0:
    raise _err("value's head_dim (its last axis) must be at least 1, got 0")
  heads, kv_heads = query.shape[-2], key.shape[-2]
  if kv_heads == 0 or heads % kv_heads:
    raise _err(f"key/value heads ({kv_heads}) must divide query heads ({heads})")


def check_broadcast(name, x, full_shape, *, boolean):
  if x is None:
    return
  if boolean and x.dtype != np.dtype(bool):
    raise _err(f"{name} must be a bool array (True = attend), got {x.dtype}")
  if not boolean and not jnp.issubdtype(x.dtype, jnp.floating):
    raise _err(f"{name} must be a floating array, got {x.dtype}")
  if x.ndim != 4 or any(d not in (1, f) for d, f in zip(x.shape, full_shape)):
    raise _err(
      f"{name} must be 4-D and broadcastable to [batch, heads, q_len, kv_len] = "
      f"{tuple(full_shape)}, got {x.shape}"
    )


def check_lengths(name, x, batch):
  if x is None:
    return
  if x.shape != (batch,) or not jnp.issubdtype(x.dtype, jnp.integer):
    raise _err(f"{name} must be an integer array of shape ({batch},), got {x.dtype}{list(x.shape)}")


def check_segments(q_ids, kv_ids, batch, q_len, kv_len):
  if (q_ids is None) != (kv_ids is None):
    raise _err("query_segment_ids and key_value_segment_ids must be given together")
  if q_ids is None:
    return
  for name, x, n in (
    ("query_segment_ids", q_ids, q_len),
    ("key_value_segment_ids", kv_ids, kv_len),
  ):
    if x.shape != (batch, n) or not jnp.issubdtype(x.dtype, jnp.integer):
      raise _err(
        f"{name} must be an integer array of shape {(batch, n)}, got {x.dtype}{list(x.shape)}"
      )


def window_sides(local_window_size):
  """(left, right) with -1 for 'unbounded', from None, an int or a (left, right) pair of ints."""
  if local_window_size is None:
    return (-1, -1)
  if is_int(local_window_size):
    local_window_size = (local_window_size, local_window_size)
  if (
    not isinstance(local_window_size, (tuple, list))
    or len(local_window_size) != 2
    or not all(is_int(s) for s in local_window_size)
  ):
    raise _err(
      f"local_window_size must be an int or a (left, right) pair of ints, got {local_window_size!r}"
    )
  left, right = (int(s) for s in local_window_size)
  if left < 0 or right < 0:
    raise _err(f"local_window_size sides must be >= 0, got {(left, right)}")
  if max(left, right) > np.iinfo(np.int32).max:
    raise _err(f"local_window_size sides must fit int32, got {(left, right)}")
  return (left, right)


def is_int(x):
  return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def check_flag(name, x):
  """A Python bool (it is compiled into the kernel), not a traced value."""
  if isinstance(x, (bool, np.bool_)) or is_int(x) and x in (0, 1):
    return bool(x)
  raise _err(
    f"{name} must be a Python bool (it is compiled into the kernel), got {type(x).__name__}"
  )


def _static_number(name, x):
  try:
    return float(x)
  except Exception:  # noqa: BLE001 - a tracer or an array: say what is allowed
    raise _err(
      f"{name} must be a Python number (it is compiled into the kernel), got {type(x).__name__}"
    ) from None


def check_scalars(scale, softcap, dropout_rate, dropout_rng):
  """Numbers that become float32 kernel attributes: finite and exact enough in float32."""
  for name, x in (("scale", scale), ("softcap", softcap), ("dropout_rate", dropout_rate)):
    if x is not None:
      _static_number(name, x)
  if scale is not None and not (np.isfinite(float(scale)) and abs(float(scale)) <= float(F32.max)):
    raise _err(f"scale must be a finite float32 number, got {scale!r}")
  if softcap is not None:
    c = float(softcap)
    if not (np.isfinite(c) and float(F32.tiny) <= c <= float(F32.max)):
      raise _err(
        f"softcap must be > 0 and a normal finite float32 number "
        f"({F32.tiny:.3g} to {F32.max:.3g}), or None; got {softcap!r}"
      )
  rate = float(dropout_rate)
  if not (0.0 <= rate < 1.0 and np.float32(rate) < 1.0):
    raise _err(
      f"dropout_rate must be in [0, 1) (also once rounded to float32), got {dropout_rate!r}"
    )
  if rate > 0.0 and dropout_rng is None:
    raise _err("dropout_rate > 0 needs a dropout_rng key")


def check_sinks(sinks, heads):
  """sinks: None or a float array of shape [heads] (one logit per query head)."""
  if sinks is None:
    return None
  if not jnp.issubdtype(sinks.dtype, jnp.floating):
    raise TypeError(f"dot_product_attention: sinks must be a float array, got dtype {sinks.dtype}")
  if sinks.shape != (heads,):
    raise ValueError(
      f"dot_product_attention: sinks must have shape ({heads},) (one logit per query head), "
      f"got {sinks.shape}"
    )
  return sinks
