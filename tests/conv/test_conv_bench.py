"""The conv benchmark's harness runs (one small case on the CPU) and writes
its records: jaxdnn and XLA timed, FLOPs counted, the speedup attached."""

import json

from jaxdnn.conv import bench


def test_quick_run_writes_records(tmp_path, capsys):
  out = tmp_path / "conv.json"
  assert bench.main(["--quick", "--impls", "jaxdnn,xla", "--out", str(out)]) == 0
  records = json.loads(out.read_text())["records"]
  assert {(r["impl"], r["direction"]) for r in records} == {
    (i, d) for i in ("jaxdnn", "xla") for d in ("fwd", "fwd+bwd")
  }
  for r in records:
    assert r["time_us"] > 0 and r["tflops"] > 0
  assert all("xla" in r["speedup_vs"] for r in records if r["impl"] == "jaxdnn")
  assert "TFLOP/s" in capsys.readouterr().out


def test_flops_count_taps_and_groups():
  # 2 * N * out positions * C_out * taps * C_in/groups
  assert bench._flops((2, 8, 8, 4), (3, 3, 4, 6), {}) == 2 * 2 * 64 * 6 * 9 * 4
  assert bench._flops((2, 8, 8, 4), (3, 3, 1, 4), dict(feature_group_count=4)) == 2 * 2 * 64 * 4 * 9
  assert bench._flops((2, 8, 8, 4), (3, 3, 4, 4), dict(strides=2)) == 2 * 2 * 16 * 4 * 9 * 4
