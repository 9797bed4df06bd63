"""Which implementation serves a call: the `implementation=` argument."""

from __future__ import annotations

from jaxdnn import _extension

IMPLEMENTATIONS = (None, "cuda", "cpu", "xla")


def check_implementation(implementation, op: str) -> None:
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(
        f"{op}: implementation must be one of None, 'cuda', 'cpu' or 'xla', "
        f"got {implementation!r}")
  if implementation == "cuda" and not _extension.has_cuda_kernels():
    raise ValueError(
        f"{op}: implementation='cuda' was asked for but jaxdnn was built "
        "without its CUDA extension (no nvcc at build time)")


def lowering_platform_error(op: str, implementation, platform: str) -> Exception:
  return ValueError(
      f"{op}: implementation={implementation!r} cannot run on platform "
      f"{platform!r}; use implementation=None to pick the kernel for the "
      "platform, or 'xla' for the plain-JAX composition")
