"""Softmax and log-softmax (jax.nn's, `where` included): api (the public
functions), reference (plain JAX, the oracle), primitives (the FFI
primitives), validation (argument checks)."""

from jaxdnn.softmax.api import log_softmax, softmax

__all__ = ["softmax", "log_softmax"]
