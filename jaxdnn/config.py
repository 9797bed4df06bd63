"""jaxdnn's global switches, as torch.backends.cudnn has them.

  jaxdnn.config.benchmark      time the candidate algorithms of a call whose
                               algorithm is left to jaxdnn (algorithm=None,
                               implementation=None) once per problem, and
                               keep the fastest (cudnn.benchmark); also the
                               scope of `with jaxdnn.autotune():`
  jaxdnn.config.deterministic  only candidates whose results do not depend
                               on scheduling (cudnn.deterministic): jaxdnn's
                               kernels all are; XLA's GPU convolutions are
                               only with --xla_gpu_deterministic_ops
  jaxdnn.config.autotune_cache the file the timings' winners are kept in and
                               read from by later processes (default:
                               $XDG_CACHE_HOME/jaxdnn/autotune.json, else
                               ~/.cache/jaxdnn/autotune.json); None keeps
                               them in memory only

Read when a call is traced: set them before jit traces the function.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os


def _default_cache() -> str:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "jaxdnn", "autotune.json")


@dataclasses.dataclass
class Config:
  benchmark: bool = False
  deterministic: bool = False
  autotune_cache: str | None = dataclasses.field(default_factory=_default_cache)


config = Config()


@contextlib.contextmanager
def autotune(cache: str | os.PathLike | None = None, *, deterministic: bool | None = None):
  """Within the block, calls with algorithm=None time their candidates once
  per problem (a progress line each) and run the fastest; the winners go to
  `cache` (default: config.autotune_cache) for later processes."""
  saved = dataclasses.replace(config)
  config.benchmark = True
  if cache is not None:
    config.autotune_cache = os.fspath(cache)
  if deterministic is not None:
    config.deterministic = deterministic
  try:
    yield config
  finally:
    config.benchmark = saved.benchmark
    config.autotune_cache = saved.autotune_cache
    config.deterministic = saved.deterministic
