"""The house rules every family lives by: one switch table (documented, read
only by C++), one registration point, plans made in C++."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

import jaxdnn
from jaxdnn import _extension, _families, switches

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_switch_docs_match_the_table():
  page = (ROOT / "docs" / "switches.md").read_text()
  assert page == switches.markdown(), "regenerate: python -m jaxdnn.switches > docs/switches.md"


def test_switch_table_rows_are_complete():
  rows = switches.table()
  names = [r[0] for r in rows]
  assert len(names) == len(set(names))
  for name, kind, default, _allowed, meaning in rows:
    assert name.startswith("JAXDNN_") and kind in ("bool", "int", "choice") and meaning
    assert switches.value(name) == default or name in os.environ


def test_python_reads_no_switch():
  # Switches are read by C++ only (cpp/common/switches.h); Python asks C++.
  pattern = re.compile(r"os\.environ[^\n]*JAXDNN_|getenv\([^\n]*JAXDNN_")
  offenders = [
    str(p.relative_to(ROOT))
    for p in (ROOT / "jaxdnn").rglob("*.py")
    if pattern.search(p.read_text())
  ]
  assert not offenders


def test_switch_value_is_read_from_the_environment_once_and_validated():
  code = (
    "from jaxdnn import switches; "
    "print(switches.value('JAXDNN_ATTENTION_SM90_BWD'), switches.value('JAXDNN_NORM_FWD'), "
    "switches.value('JAXDNN_ATTENTION_SM90_FWD_RESCALE'))"
  )
  env = dict(
    os.environ,
    JAXDNN_ATTENTION_SM90_BWD="2",
    JAXDNN_NORM_FWD="bogus",
    JAXDNN_ATTENTION_SM90_FWD_RESCALE="6.5",
  )
  out = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd="/", check=True
  ).stdout.split()
  assert out == ["2", "pairs", "6.5"]  # a value outside `allowed` reads as the default


def test_every_family_is_registered_once():
  targets = set(_extension.cpu_module.registrations())
  for family in _families.FAMILIES:
    module = __import__(f"jaxdnn.{family}", fromlist=["__all__"])
    for name in module.__all__:
      assert getattr(jaxdnn, name) is getattr(module, name)
  assert {
    "jaxdnn_norm_fwd",
    "jaxdnn_norm_bwd",
    "jaxdnn_attention_fwd",
    "jaxdnn_attention_bwd",
  } <= targets
  if _extension.has_cuda_kernels():
    # A family may declare targets whose CUDA kernel is still pending or
    # optional (primitives.CUDA_PENDING: built only with CUTLASS, say); those
    # may miss, and then on CUDA their primitives lower to plain JAX.
    pending = set()
    for family in _families.FAMILIES:
      try:
        prims = __import__(f"jaxdnn.{family}.primitives", fromlist=["CUDA_PENDING"])
      except ImportError:
        continue
      pending |= set(getattr(prims, "CUDA_PENDING", ()))
    assert pending <= targets
    assert targets - pending <= set(_extension.cuda_module.registrations()) <= targets


def test_bench_lists_every_benchmarked_family():
  from jaxdnn.bench.__main__ import benchmarked_families

  package = pathlib.Path(jaxdnn.__file__).parent
  with_bench = [f for f in _families.FAMILIES if (package / f / "bench.py").exists()]
  assert benchmarked_families() == with_bench and "norms" in with_bench


requires_cuda_build = pytest.mark.skipif(
  not _extension.has_cuda_kernels(), reason="built without the CUDA extension"
)


@requires_cuda_build
def test_norm_plan_sizes_the_backward_workspace():
  q = lambda rows, dim, groups=1, itemsize=2: _extension.plan_query(
    "norm_bwd_partials", rows=rows, dim=dim, groups=groups, itemsize=itemsize
  )
  assert q(32768, 4096) == 264  # one wave of 132 SMs, two blocks each (rows <= 512 vectors)
  assert q(8192, 8192, itemsize=4) == 132  # 32 KB rows: one block per SM
  assert q(100, 768) == 7  # at least 16 rows per block
  assert q(70000, 768, groups=70000) == 1


@requires_cuda_build
def test_attention_plan_sizes_the_workspaces():
  def args(batch, q_len, kv_len, heads, kv_heads, head_dim, **kw):
    base = dict(
      batch=batch,
      q_len=q_len,
      kv_len=kv_len,
      heads=heads,
      kv_heads=kv_heads,
      head_dim=head_dim,
      dtype=1,
      operands=0,
      causal=0,
      window_left=-1,
      window_right=-1,
      softcap=0,
      dropout=0,
      deterministic=0,
      scale_positive=1,
      bias_dim0=1,
      bias_dim1=1,
      bias_dim2=1,
      bias_dim3=1,
    )
    base.update(kw)
    return base

  fwd = lambda *a, **kw: _extension.plan_query("attention_fwd_workspace", **args(*a, **kw))
  bwd = lambda *a, **kw: _extension.plan_query("attention_bwd_workspace", **args(*a, **kw))
  # Decode shapes: the split-KV partials (DecodeWorkspaceElems).
  assert fwd(1, 1, 16384, 16, 16, 128) == 266240
  assert fwd(16, 1, 16384, 16, 16, 128) == 532480
  assert fwd(1, 16, 65536, 16, 1, 256) == 8454144
  assert fwd(1, 1, 1000, 16, 16, 128) == 16640
  assert fwd(128, 1, 4096, 32, 8, 128) == 0  # enough CTAs without splitting
  assert fwd(1, 17, 65536, 16, 16, 128) == 0  # not a decode-length query
  # The sm90 forward: a tile counter for uneven tiles, segment ranges after it.
  assert fwd(2, 2048, 2048, 16, 16, 128) == 0
  assert fwd(2, 2048, 2048, 16, 16, 128, causal=1) == 64
  assert fwd(2, 2048, 2048, 16, 16, 64, window_left=256, window_right=0) == 64
  assert fwd(2, 2048, 2048, 16, 16, 128, operands=16) == 64 + 2 * 2 * (32 + 32)
  assert fwd(3, 1000, 300, 16, 16, 64, operands=16) == 64 + 2 * 3 * (16 + 6)
  assert fwd(2, 2048, 2048, 16, 16, 128, dtype=0, causal=1) == 0
  assert fwd(2, 2048, 2048, 16, 16, 96, causal=1) == 64  # head dims 96 and 192: their own kernels
  assert fwd(2, 2048, 2048, 16, 16, 80, causal=1) == 0
  assert fwd(2, 2048, 2048, 16, 16, 128, causal=1, operands=1) == 64  # a bias: the extended path
  assert fwd(2, 2048, 2048, 16, 16, 128, causal=1, operands=2) == 0  # a mask: mma.sync
  # Backward, sized to the kernel the problem takes: the Hopper kernels need
  # delta, and dK/dV partials with grouped heads only; the sm80 one always
  # the partials, and a broadcast dbias's staging area; the fused kernel's
  # dQ accumulator from 512 query rows unordered, 8192 ordered.
  base = lambda b, s, h, d: b * h * s + 2 * b * s * h * d
  delta = lambda b, s, h: b * h * s
  assert bwd(2, 256, 256, 4, 4, 128) == delta(2, 256, 4)
  assert bwd(2, 256, 256, 4, 4, 128, deterministic=1) == delta(2, 256, 4)
  assert bwd(2, 256, 256, 4, 4, 128, causal=1, window_left=64) == delta(2, 256, 4)
  assert bwd(2, 256, 256, 4, 4, 128, dtype=0) == base(2, 256, 4, 128)  # float32: sm80
  assert bwd(2, 256, 256, 4, 4, 128, scale_positive=0) == base(2, 256, 4, 128)
  assert bwd(2, 256, 256, 4, 4, 128, dropout=1, operands=32) == base(2, 256, 4, 128)
  # A bias without its gradient (a mask sent as a 0 / -inf bias) runs on the
  # sm90 backward, with room for the mma.sync fallback as below.
  assert bwd(2, 256, 256, 4, 4, 128, operands=1) == base(2, 256, 4, 128)
  # A bias with its gradient on the sm90 backward: room for the mma.sync
  # fallback (a float32 bias is only known at launch), the staging included.
  full = dict(operands=1 | 128, bias_dim0=2, bias_dim1=4, bias_dim2=256, bias_dim3=256)
  assert bwd(2, 256, 256, 4, 4, 128, **full) == base(2, 256, 4, 128)
  assert bwd(2, 256, 256, 4, 4, 128, softcap=1, **full) == base(2, 256, 4, 128)
  assert (
    bwd(
      2,
      256,
      256,
      4,
      4,
      64,
      operands=1 | 128,
      bias_dim0=1,
      bias_dim1=4,
      bias_dim2=256,
      bias_dim3=256,
    )
    == base(2, 256, 4, 64) + 2 * 4 * 256 * 256
  )
  # Head dim 96: the fused backward from 512 query rows unordered (its dQ
  # accumulator), the two-kernel one below 8192 ordered.
  assert bwd(2, 1024, 1024, 4, 4, 96) > delta(2, 1024, 4) + 2 * 1024 * 4 * 96 - 1
  assert bwd(2, 1024, 1024, 4, 4, 96, deterministic=1) == delta(2, 1024, 4)
  # Whether head dims 96 / 192 run unpadded: never with a bias, a mask,
  # dropout or float32, nor at other head dims (the rest needs an sm90 device).
  native = lambda d, *a, **kw: _extension.plan_query(
    f"attention_{d}_native_head_dim", **args(*a, **kw)
  )
  for d in ("fwd", "bwd"):
    assert native(d, 2, 256, 256, 4, 4, 128) == 0
    assert native(d, 2, 256, 256, 4, 4, 96, operands=1) == 0
    assert native(d, 2, 256, 256, 4, 4, 96, dropout=1, operands=32) == 0
    assert native(d, 2, 256, 256, 4, 4, 96, dtype=0) == 0
  assert native("bwd", 2, 256, 256, 4, 4, 192) == 0
  assert native("fwd", 2, 256, 0, 4, 4, 96) == 0  # no key: the sm90 forward's shape rules
  assert native("fwd", 2, 1, 4096, 8, 2, 96) == 0  # a decode: the padded split-KV kernels
  # Value at its own head dim (MLA): 192/128 (128/64 under a default-off
  # switch), never with a bias or lengths.
  own_value = lambda *a, **kw: _extension.plan_query(
    "attention_fwd_native_value_dim", **args(*a, **kw)
  )
  assert own_value(2, 256, 256, 4, 4, 192, value_dim=96) == 0
  assert own_value(2, 256, 256, 4, 4, 192, value_dim=128, operands=1) == 0
  assert own_value(2, 256, 256, 4, 4, 192, value_dim=128, operands=8) == 0
  assert own_value(2, 256, 256, 4, 4, 192) == 0  # value at the query's head dim
  if switches.value("JAXDNN_ATTENTION_SM90_VALUE_DIM_64") != "1":
    assert own_value(2, 256, 256, 4, 4, 128, value_dim=64) == 0
  # (GQA, where the fused kernel also keeps per-query-head dK/dV partials).
  assert bwd(2, 1024, 1024, 8, 2, 128) > base(2, 1024, 8, 128)
  assert bwd(2, 1024, 1024, 8, 2, 128, deterministic=1) == base(2, 1024, 8, 128)
  assert bwd(2, 1024, 1024, 8, 2, 128, softcap=1) == base(2, 1024, 8, 128)
