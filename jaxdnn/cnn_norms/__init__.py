"""Normalization with group statistics for CNNs and diffusion UNets:
GroupNorm and InstanceNorm with a fused activation and residual (BatchNorm
and pooling are to come). api (the public functions), reference (plain JAX,
the oracle), primitives (the FFI primitives)."""

from jaxdnn.cnn_norms.api import group_norm, instance_norm

__all__ = ["group_norm", "instance_norm"]
