"""Softmax and log-softmax (jax.nn's, `where` included) and the softmax
cross-entropy, plain and fused with the vocabulary projection: api,
cross_entropy and linear_cross_entropy (the public functions), reference
(plain JAX, the oracle), primitives (the FFI primitives), validation
(argument checks)."""

from jaxdnn.softmax.api import log_softmax, softmax
from jaxdnn.softmax.cross_entropy import softmax_cross_entropy
from jaxdnn.softmax.linear_cross_entropy import linear_cross_entropy

__all__ = ["softmax", "log_softmax", "softmax_cross_entropy", "linear_cross_entropy"]
