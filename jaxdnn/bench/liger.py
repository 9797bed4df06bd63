"""Liger-Kernel (Triton kernels for PyTorch) as an anchor, where it imports:
the GPU machine gets its pure-Python wheel carried along (benchmarks/gpu_run.sh).
Each function returns None without Liger: glu and softmax a maker in
torch_rows' form (torch -> callable), the losses the callable itself."""

from __future__ import annotations


def ops():
  """liger_kernel.ops, or None where Liger (or Triton, or a GPU) is missing."""
  try:
    import torch

    if not torch.cuda.is_available():
      return None
    import liger_kernel.ops as L

    return L
  except Exception:  # noqa: BLE001 - no Liger here: no anchor rows
    return None


def glu(activation):
  """value * act(gate) from separate (value, gate) tensors (Liger's layout)."""
  L = ops()
  fn = {"silu": "LigerSiLUMulFunction", "gelu": "LigerGELUMulFunction"}.get(activation)
  if L is None or fn is None:
    return None
  f = getattr(L, fn)
  return lambda torch: lambda value, gate: f.apply(gate, value)


def softmax():
  L = ops()
  return None if L is None else (lambda torch: L.LigerSoftmaxFunction.apply)


def cross_entropy(targets):
  """Mean cross-entropy of logits against integer `targets` (a CUDA tensor)."""
  L = ops()
  if L is None:
    return None
  return lambda x: L.LigerCrossEntropyFunction.apply(x, targets, None)[0]


def linear_cross_entropy(targets):
  """Mean loss of hidden [T, H] @ weight [V, H]^T (PyTorch's layout) against `targets`."""
  L = ops()
  if L is None:
    return None
  return lambda h, w: L.LigerFusedLinearCrossEntropyFunction.apply(h, w, targets)[0]
