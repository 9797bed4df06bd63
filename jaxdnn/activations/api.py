"""Public bias_act: activation(x + bias) over the last axis, as a custom_vjp
whose forward and backward (dx with the bias gradient, a deterministic
column sum) are jaxdnn primitives."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdnn import _extension, _platform
from jaxdnn._primitive import match_vma, vma_token
from jaxdnn.activations import kinds, reference
from jaxdnn.activations.primitives import bias_act_backward, bias_act_forward

_OP = "bias_act"
FLOATS = tuple(np.dtype(d) for d in (jnp.float32, jnp.bfloat16, jnp.float16, np.float64))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fused(static, x, bias):
  return _fwd(static, x, bias)[0]


def _fwd(static, x, bias):
  code, param, impl = static
  b = () if bias is None else (bias,)
  out = bias_act_forward.bind(
    x, *b, act=code, param=param, has_bias=bias is not None, implementation=impl
  )
  return out[0], (x, bias)


def _bwd(static, res, dy):
  code, param, impl = static
  x, bias = res
  b = () if bias is None else (bias,)
  outs = bias_act_backward.bind(
    dy, x, *b, act=code, param=param, has_bias=bias is not None, implementation=impl
  )
  return outs[0], (None if bias is None else match_vma(outs[1], vma_token(bias)))


_fused.defvjp(_fwd, _bwd)


def check_array(op, name, x):
  if not hasattr(x, "shape") or not hasattr(x, "dtype"):
    raise TypeError(f"{op}: {name} must be an array, got {type(x).__name__}")
  if np.dtype(x.dtype) not in FLOATS:
    raise TypeError(
      f"{op}: {name} must be float32, bfloat16, float16 or float64, got dtype {x.dtype}"
    )


def cuda_unsupported(target):
  return lambda: (
    None if _extension.has_cuda_target(target) else f"this build has no CUDA {target} kernel"
  )


def bias_act(
  x,
  bias=None,
  *,
  activation,
  approximate=True,
  negative_slope=0.01,
  alpha=1.0,
  implementation=None,
):
  """activation(x + bias) in one pass, and its gradient in one more.

  Args:
    x: [..., features], float32, bfloat16 or float16 (float64 runs on the XLA
      composition with one warning).
    bias: None or [features], any float dtype (added in float32); its
      gradient is a deterministic sum over the rows, in bias's dtype.
    activation: one of "identity", "relu", "relu6", "gelu", "silu",
      "sigmoid", "tanh", "elu", "softplus", "leaky_relu", "squared_relu"
      (jax.nn's definitions; squared_relu is relu(x) ** 2).
    approximate: gelu's tanh approximation (True, jax.nn's default) or the
      exact erf form (False).
    negative_slope: leaky_relu's slope for x < 0 (jax.nn's default 0.01).
    alpha: elu's scale for x <= 0.
    implementation: None (the kernel for the platform), "cuda", "cpu" or
      "xla" (plain JAX, also the test oracle).

  Returns:
    An array of x's shape and dtype, computed in float32 and rounded once.
  """
  check_array(_OP, "x", x)
  code, param = kinds.resolve(
    _OP, activation, approximate=approximate, negative_slope=negative_slope, alpha=alpha
  )
  x = jnp.asarray(x)
  if bias is not None:
    check_array(_OP, "bias", bias)
    bias = jnp.asarray(bias)
    if x.ndim == 0 or bias.shape != x.shape[-1:]:
      raise ValueError(
        f"{_OP}: bias must have shape (features,) = {x.shape[-1:]}, x's last axis, got {bias.shape}"
      )
  impl = _platform.resolve(
    implementation,
    _OP,
    cuda_unsupported("jaxdnn_bias_act_fwd"),
    no_kernel="a float64 x" if x.dtype == jnp.float64 else None,
  )
  if impl == "xla":
    return reference.bias_act(x, bias, code, param)
  shape = x.shape
  xr = x.reshape(1) if x.ndim == 0 else x
  b = None if bias is None else bias.astype(jnp.float32)
  return _fused((code, param, impl), xr, b).reshape(shape)
