"""Which implementation serves a call: the `implementation=` argument."""

from __future__ import annotations

import warnings

import jax

from jaxdnn import _extension

IMPLEMENTATIONS = (None, "cuda", "cpu", "xla")


def check_implementation(implementation, op: str) -> None:
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(
      f"{op}: implementation must be one of None, 'cuda', 'cpu' or 'xla', got {implementation!r}"
    )
  if implementation == "cuda" and not _extension.has_cuda_kernels():
    raise ValueError(
      f"{op}: implementation='cuda' was asked for but jaxdnn was built "
      "without its CUDA extension (no nvcc at build time)"
    )


def lowering_platform_error(op: str, implementation, platform: str) -> Exception:
  return ValueError(
    f"{op}: implementation={implementation!r} cannot run on platform "
    f"{platform!r}; use implementation=None to pick the kernel for the "
    "platform, or 'xla' for the plain-JAX composition"
  )


def resolve(implementation, op: str, cuda_unsupported=None, no_kernel=None):
  """Which implementation serves a call, for every family.

  `implementation` as the user gave it (checked here); `cuda_unsupported`, a
  family's "can CUDA serve this call" predicate: a function of no arguments
  returning None when it can, else the reason it cannot; `no_kernel`, what
  no kernel of any platform covers (e.g. "float64 inputs"), or None. None
  resolves to the kernel for the platform (returned as None: the lowering
  picks CPU or CUDA), or to "xla" with a warning where no jaxdnn kernel
  covers the call; "cuda" and "cpu" raise instead of falling back.
  """
  check_implementation(implementation, op)
  if no_kernel is not None:
    if implementation in ("cpu", "cuda"):
      raise ValueError(f"{op}: implementation={implementation!r} has no kernel for {no_kernel}")
    if implementation is None:
      warnings.warn(
        f"{op}: no jaxdnn kernel for {no_kernel}; using the XLA composition", stacklevel=3
      )
      return "xla"
  backend = jax.default_backend()
  if implementation == "cuda" or (implementation is None and backend == "gpu"):
    reason = None
    if not _extension.has_cuda_kernels():
      reason = "jaxdnn was built without its CUDA extension"
    elif cuda_unsupported is not None:
      reason = cuda_unsupported()
    if reason is None:
      return implementation
    if implementation == "cuda":
      raise ValueError(f"{op}: implementation='cuda' cannot serve this call: {reason}")
    warnings.warn(f"{op}: {reason}; using the XLA composition", stacklevel=3)
    return "xla"
  if implementation is not None or backend == "cpu":
    return implementation
  warnings.warn(
    f"{op}: no jaxdnn kernel for backend {backend!r}; using the XLA composition", stacklevel=3
  )
  return "xla"
