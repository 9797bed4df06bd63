"""Softmax and log-softmax (jax.nn's, `where` included) and the softmax
cross-entropy: api and cross_entropy (the public functions), reference
(plain JAX, the oracle), primitives (the FFI primitives), validation
(argument checks)."""

from jaxdnn.softmax.api import log_softmax, softmax
from jaxdnn.softmax.cross_entropy import softmax_cross_entropy

__all__ = ["softmax", "log_softmax", "softmax_cross_entropy"]
