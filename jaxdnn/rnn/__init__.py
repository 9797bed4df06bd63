"""Recurrent layers (issue 28): LSTM, GRU and the plain tanh/ReLU RNN.

Groundwork only, not yet a family of jaxdnn's public API: the weight layout
and its converters (layout.py) and the plain-JAX oracle (reference.py) that
the CPU and CUDA kernels will be tested against. `jaxdnn.rnn(...)` arrives
with its kernels (a family in jaxdnn/_families.py and cpp/rnn/).
"""
