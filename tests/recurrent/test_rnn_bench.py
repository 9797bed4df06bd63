"""The rnn benchmark's harness runs (--quick: toy sizes on the CPU) and writes
its records: jaxdnn and the lax.scan timed, FLOPs counted, speedups and
their geometric means attached, the anchors that cannot run here named."""

import json

import jax
import pytest

from jaxdnn.recurrent import bench


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU smoke run")
def test_quick_run_writes_records(tmp_path, capsys):
  out = tmp_path / "rnn.json"
  argv = ["--quick", "--batches", "1", "--hiddens", "8", "--steps", "4", "--repeats", "1"]
  assert bench.main(argv + ["--impls", "jaxdnn,scan,jax_rnn", "--out", str(out)]) == 0
  data = json.loads(out.read_text())
  records = [r for r in data["records"] if r["impl"] in ("jaxdnn", "scan")]
  want = {("lstm", "bfloat16"), ("gru", "bfloat16"), ("lstm", "float32")}
  assert {(r["op"], r["dtype"], r["direction"], r["impl"]) for r in records} == {
    (m, dt, d, i) for m, dt in want for d in ("fwd", "fwd+bwd") for i in ("jaxdnn", "scan")
  }
  for r in records:
    assert r["time_us"] > 0 and r["tflops"] > 0
    assert r["flops"] == bench.flops(r["op"], 1, 8, 4, direction=r["direction"])
    if r["impl"] == "jaxdnn":
      assert "scan" in r["speedup_vs"]
  assert "lstm float32 fwd+bwd vs scan (all)" in data["summary"]
  # jax.experimental.rnn needs cuDNN: on the CPU it is named, not timed.
  assert "jax_rnn" in data["notes"] and not any(r["impl"] == "jax_rnn" for r in data["records"])
  assert "TFLOP/s" in capsys.readouterr().out


def test_grid_and_flops():
  cases = bench.grid()
  assert len(cases) == 2 * 4 * 3 * 2 + 4 * 3 * 2  # bfloat16 for both, float32 LSTM only
  assert ("gru", 1, 2048, 1024, "bfloat16") in cases
  assert ("gru", 1, 256, 256, "float32") not in cases
  # 2 * steps * batch * (input + hidden) * gates * hidden; backward 2x more
  assert bench.flops("lstm", 64, 1024, 256) == 2 * 256 * 64 * 2048 * 4 * 1024
  assert bench.flops("gru", 2, 8, 3, input_size=4, direction="fwd+bwd") == 3 * 2 * 3 * 2 * 12 * 24
