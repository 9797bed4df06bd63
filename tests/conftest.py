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


def pytest_collection_modifyitems(config, items):
  # TEST_SHARD=i/n keeps every n-th test from the i-th: the GPU run script
  # runs n shards side by side (the suite is bound by XLA compiles on the host).
  shard = os.environ.get("TEST_SHARD")
  if shard:
    i, n = (int(v) for v in shard.split("/"))
    items[:] = [item for k, item in enumerate(items) if k % n == i]
