import os

# Several CPU devices for the sharding tests; must be set before jax starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", False)


def on_gpu() -> bool:
  return jax.default_backend() == "gpu"


requires_gpu = pytest.mark.skipif(not on_gpu(), reason="needs a CUDA GPU")
# Tests of the CPU kernel itself (implementation="cpu", or None expecting the
# CPU kernel): on a GPU machine the arrays live on the GPU.
requires_cpu_backend = pytest.mark.skipif(on_gpu(), reason="runs the CPU kernel on CPU arrays")


# ---- the composability table (tests/conformance.py): op x check -> pass/FAIL/skip

def pytest_collection_modifyitems(items):
  import conformance
  conformance.tag(items)


def pytest_runtest_logreport(report):
  import conformance
  conformance.record(report)


def pytest_terminal_summary(terminalreporter):
  import pathlib

  import conformance
  if hasattr(terminalreporter.config, "workerinput"):
    return  # an xdist worker: the controller has every outcome and prints the table
  text = conformance.table()
  if text is None:
    return
  path = pathlib.Path(__file__).parent / ".composability.md"
  path.write_text("# Composability: op x transformation\n\n" + text + "\n")
  terminalreporter.write_sep("=", "composability (tests/conformance.py)")
  terminalreporter.write_line(text)
  terminalreporter.write_line(f"(also in {path})")
