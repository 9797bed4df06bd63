"""Loads jaxdnn's compiled FFI modules and registers their targets with XLA.

The CPU module is always built; the CUDA module exists when nvcc was found at
build time. Registration happens once, at import of jaxdnn.
"""

from __future__ import annotations

import importlib

import jax
import jaxlib.version
import numpy as np

try:
  from jaxdnn import _build_info
except ImportError as e:  # Running from a source tree that was never built.
  raise ImportError(
    "jaxdnn's compiled extension is missing: install the package "
    "(`pip install .`) and import it from outside the source tree"
  ) from e


def _version_tuple(v: str) -> tuple[int, ...]:
  parts = []
  for p in v.split(".")[:3]:
    digits = "".join(ch for ch in p if ch.isdigit())
    parts.append(int(digits or 0))
  return tuple(parts)


def _check_jaxlib() -> None:
  # The FFI headers compiled into the extension come from the jaxlib present
  # at build time; an older runtime may not understand the handlers' ABI.
  built, running = _build_info.BUILT_AGAINST_JAXLIB, jaxlib.version.__version__
  if _version_tuple(running) < _version_tuple(built):
    raise ImportError(
      f"jaxdnn was built against jaxlib {built} but jaxlib {running} is "
      f"running; upgrade jaxlib to >= {built} or rebuild jaxdnn"
    )


_check_jaxlib()

cpu_module = importlib.import_module("jaxdnn._jaxdnn_cpu")
for _name, _capsule in cpu_module.registrations().items():
  jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")

cuda_module = None
if _build_info.BUILT_CUDA:
  cuda_module = importlib.import_module("jaxdnn._jaxdnn_cuda")
  for _name, _capsule in cuda_module.registrations().items():
    jax.ffi.register_ffi_target(_name, _capsule, platform="CUDA")


def built_with_cuda() -> bool:
  """Whether jaxdnn was built with its CUDA extension (not whether a GPU is here)."""
  return cuda_module is not None


has_cuda_kernels = built_with_cuda  # the older name, kept


def cuda_available() -> bool:
  """Whether jaxdnn's CUDA kernels can run here: built with them, and jax sees a GPU."""
  if cuda_module is None:
    return False
  try:
    return bool(jax.devices("gpu"))
  except RuntimeError:
    return False


# The dtype codes of plan queries (cpp/common/ffi_registry.h: DataTypeFromCode).
DTYPE_CODES = {"float32": 0, "bfloat16": 1, "float16": 2}


def dtype_code(dtype) -> int:
  return DTYPE_CODES.get(np.dtype(dtype).name, 3)


def plan_query(name: str, **args: int) -> int:
  """Asks the CUDA extension's C++ plan (e.g. a workspace size) for a problem:
  the same function the launcher runs, so Python never mirrors its rules."""
  return int(cuda_module.plan_query(name, {k: int(v) for k, v in args.items()}))


def switches() -> list[tuple[str, str, str, str, str]]:
  """The environment switch table, (name, type, default, allowed, meaning) rows,
  from the C++ table every kernel reads (cpp/common/switches.def)."""
  return [tuple(row) for row in cpu_module.switches()]


def has_cuda_target(name: str) -> bool:
  """Whether the CUDA extension carries the FFI target `name`."""
  return cuda_module is not None and name in _cuda_targets


_cuda_targets = frozenset(cuda_module.registrations()) if cuda_module is not None else frozenset()
