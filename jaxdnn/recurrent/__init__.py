"""Recurrent layers (issue 28): LSTM, GRU and the plain tanh/ReLU RNN.

`jaxdnn.rnn(x, params, mode=...)` (api.py) runs multi-layer, bidirectional
stacks with per-example lengths on a C++ CPU recurrence kernel
(cpp/recurrent/); the weight layout and its PyTorch/Flax converters are in
jaxdnn.recurrent.layout, the plain-JAX oracle in reference.py. No CUDA
recurrence kernel yet. jaxdnn.flax.RNN (nnx_layer.py) stands in for
flax.nnx.RNN; bench.py is `python -m jaxdnn.bench rnn`.
"""

from jaxdnn.recurrent.api import rnn

__all__ = ["rnn"]
