"""Fused activations: bias + activation (`bias_act`) and gated linear units
(`glu`). kinds (the activation names and their codes), api and glu (the
public functions), reference (plain JAX, the oracle), primitives (the FFI
primitives)."""

from jaxdnn.activations.api import bias_act
from jaxdnn.activations.glu import glu

__all__ = ["bias_act", "glu"]
