"""LayerNorm and RMSNorm: api (public functions), reference (plain JAX),
primitives (forward and backward FFI primitives), validation (argument checks)."""

from jaxdnn.norms.api import layer_norm, rms_norm

__all__ = ["layer_norm", "rms_norm"]
