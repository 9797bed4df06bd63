"""PyTorch cross-check (where torch is importable; CI has none): weights
converted with layout.to_torch run the same model in nn.LSTM / nn.GRU /
nn.RNN, with packed sequences for the lengths; and from_torch back."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import on_gpu

import jaxdnn
from jaxdnn.recurrent import layout

torch = pytest.importorskip("torch")

# jaxdnn's CUDA kernel on a GPU against PyTorch's CPU one: CUDA's expf/tanhf
# and another FMA order (test_conformance.tol).
TOL = 3e-5 if on_gpu() else 1e-5


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
def test_torch_runs_the_same_model(mode):
  batch, steps, features, hidden, layers = 3, 6, 5, 4, 2
  params = layout.init_params(
    jax.random.key(0), mode, features, hidden, num_layers=layers, bidirectional=True
  )
  x = np.array(jax.random.normal(jax.random.key(1), (batch, steps, features)), np.float32)
  lengths = np.array([6, 1, 4])
  out, state = jaxdnn.rnn(x, params, mode=mode, seq_lengths=jnp.asarray(lengths))
  kind = {"lstm": "LSTM", "gru": "GRU"}.get(mode, "RNN")
  extra = {"nonlinearity": mode[4:]} if kind == "RNN" else {}
  net = getattr(torch.nn, kind)(
    features, hidden, num_layers=layers, bidirectional=True, batch_first=True, **extra
  )
  net.load_state_dict(
    {k: torch.from_numpy(np.array(v)) for k, v in layout.to_torch(params).items()}
  )
  packed = torch.nn.utils.rnn.pack_padded_sequence(
    torch.from_numpy(x), torch.from_numpy(lengths), batch_first=True, enforce_sorted=False
  )
  with torch.no_grad():
    t_out, t_state = net(packed)
  t_out, _ = torch.nn.utils.rnn.pad_packed_sequence(t_out, batch_first=True, total_length=steps)
  np.testing.assert_allclose(out, t_out.numpy(), rtol=TOL, atol=TOL)
  h, t_h = (state[0], t_state[0]) if mode == "lstm" else (state, t_state)
  np.testing.assert_allclose(h, t_h.numpy(), rtol=TOL, atol=TOL)
  if mode == "lstm":
    np.testing.assert_allclose(state[1], t_state[1].numpy(), rtol=TOL, atol=TOL)
  sd = {k: v.numpy() for k, v in net.state_dict().items()}
  back = layout.from_torch(sd, mode, num_layers=layers, bidirectional=True)
  jax.tree.map(np.testing.assert_array_equal, back, jax.tree.map(np.asarray, params))
