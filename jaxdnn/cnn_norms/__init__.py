"""Normalization with group statistics for CNNs and diffusion UNets:
BatchNorm (synchronized over an axis_name), GroupNorm and InstanceNorm,
with a fused activation and residual (pooling is to come). api and
batch_norm (the public functions), batch_norm_primitives, reference (plain JAX,
the oracle), primitives (the FFI primitives)."""

from jaxdnn.cnn_norms.api import group_norm, instance_norm
from jaxdnn.cnn_norms.batch_norm import batch_norm

__all__ = ["batch_norm", "group_norm", "instance_norm"]
