"""Convolution, channels-last, 1D-3D: conv (Flax's nn.Conv arguments, groups
and depthwise, input and kernel dilation) and conv_transpose (Flax's
nn.ConvTranspose), each with a fused epilogue activation(alpha * conv +
bias + beta * residual). geometry (arguments to one lax-style problem),
reference (plain JAX, the oracle), primitives (forward, data gradient,
weight gradient), api (the public functions)."""

from jaxdnn.conv.api import conv, conv_plan, conv_transpose

__all__ = ["conv", "conv_transpose", "conv_plan"]
