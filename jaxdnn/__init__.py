"""jaxdnn: fused deep-learning primitives for JAX, C++/CUDA kernels behind XLA FFI."""

import importlib

from jaxdnn import _extension
from jaxdnn._families import FAMILIES

__version__ = "0.1.0"
__all__ = ["built_with_cuda", "cuda_available", "has_cuda_kernels"]

for _family in FAMILIES:
  _module = importlib.import_module(f"jaxdnn.{_family}")
  for _name in _module.__all__:
    globals()[_name] = getattr(_module, _name)
  __all__ += list(_module.__all__)
del _family, _module, _name

from jaxdnn import flax as flax  # noqa: E402  (jaxdnn.flax.attention_fn; flax is not imported)
from jaxdnn.config import autotune, config  # noqa: E402

__all__ += ["autotune", "config"]

built_with_cuda = _extension.built_with_cuda
cuda_available = _extension.cuda_available
has_cuda_kernels = _extension.has_cuda_kernels  # = built_with_cuda, the older name
