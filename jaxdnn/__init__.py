"""jaxdnn: fused deep-learning primitives for JAX, C++/CUDA kernels behind XLA FFI."""

from jaxdnn import _extension
from jaxdnn.attention import dot_product_attention, dot_product_attention_context_parallel
from jaxdnn.norms import layer_norm, rms_norm

__version__ = "0.1.0"
__all__ = ["dot_product_attention", "dot_product_attention_context_parallel", "layer_norm", "rms_norm", "has_cuda_kernels"]

has_cuda_kernels = _extension.has_cuda_kernels
