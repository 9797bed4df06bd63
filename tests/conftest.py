import os
import pathlib
import sys

# Every family folder's helpers (norm_cases, attention_cases, ...) import by name.
for _folder in sorted(pathlib.Path(__file__).parent.iterdir()):
  if _folder.is_dir() and not _folder.name.startswith((".", "_")) and str(_folder) not in sys.path:
    sys.path.append(str(_folder))

# Several CPU devices for the sharding tests; must be set before jax starts.
# No GEMM autotuning: the tests check values, not speed, and on a GPU the
# oracles' autotuned compiles were most of the suite's time.
os.environ.setdefault(
  "XLA_FLAGS", "--xla_force_host_platform_device_count=4 --xla_gpu_autotune_level=0"
)

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", False)


def on_gpu() -> bool:
  return jax.default_backend() == "gpu"


requires_gpu = pytest.mark.skipif(not on_gpu(), reason="needs a CUDA GPU")
# Tests of the CPU kernel itself (implementation="cpu", or None expecting the
# CPU kernel): on a GPU machine the arrays live on the GPU.
requires_cpu_backend = pytest.mark.skipif(on_gpu(), reason="runs the CPU kernel on CPU arrays")


@pytest.fixture(autouse=True)
def _recurrent_full_float32_dots(request):
  """The recurrent tests' float32 dots in full precision: on a GPU, XLA's
  float32 dot may run in TF32 (about 1e-3 relative) in the oracle's
  recurrence (h @ w_hh each step) and either side's input projection, which
  is not the error those tests measure. No effect on the CPU."""
  if "recurrent" not in request.node.path.parts:
    yield
    return
  with jax.default_matmul_precision("highest"):
    yield


# ---- the composability table (tests/conformance.py): op x check -> pass/FAIL/skip


def pytest_collection_modifyitems(items):
  import conformance

  conformance.tag(items)
  # TEST_SHARD=i/n keeps every n-th test from the i-th: the GPU run script
  # runs n shards side by side (the suite is bound by XLA compiles on the host).
  shard = os.environ.get("TEST_SHARD")
  if shard:
    i, n = (int(v) for v in shard.split("/"))
    items[:] = [item for k, item in enumerate(items) if k % n == i]


def pytest_runtest_logreport(report):
  import conformance

  conformance.record(report)


def pytest_terminal_summary(terminalreporter):
  import pathlib

  import conformance

  if hasattr(terminalreporter.config, "workerinput"):
    return  # an xdist worker: the controller has every outcome and prints the table
  _dump_for_merge()
  _fuzz_summary(terminalreporter)
  text = conformance.table()
  if text is None:
    return
  path = pathlib.Path(__file__).parent / ".composability.md"
  path.write_text("# Composability: op x transformation\n\n" + text + "\n")
  terminalreporter.write_sep("=", "composability (tests/conformance.py)")
  terminalreporter.write_line(text)
  terminalreporter.write_line(f"(also in {path})")


def _fuzz_counts():
  """(op, implementation) -> counts, from every test module's FUZZ_COUNTS."""
  counts = {}
  for module in list(sys.modules.values()):
    try:
      found = getattr(module, "FUZZ_COUNTS", None)
    except Exception:  # noqa: BLE001 - torch.classes raises on any unknown name
      continue
    counts.update(found if isinstance(found, dict) else {})
  return counts


def _fuzz_summary(terminalreporter):
  counts = _fuzz_counts()
  if not counts:
    return
  terminalreporter.write_sep("=", "fuzz table (tests/fuzz): cases per op and implementation")
  terminalreporter.write_line("| op | implementation | tried | clean | wrong | crash |")
  for (op, impl), c in sorted(counts.items()):
    terminalreporter.write_line(
      f"| {op} | {impl} | {c['tried']} | {c['clean']} | {c['wrong']} | {c['crash']} |"
    )


def _dump_for_merge():
  """With RESULTS_JSON set (a shard of a split run, benchmarks/gpu_run.sh),
  this process's composability and fuzz counts go there as JSON, for
  tests/merge_tables.py to join."""
  import json

  import conformance

  path = os.environ.get("RESULTS_JSON")
  if not path:
    return
  fuzz = _fuzz_counts()
  data = dict(
    conformance=conformance.dump(), fuzz=[[op, impl, c] for (op, impl), c in fuzz.items()]
  )
  pathlib.Path(path).write_text(json.dumps(data))
