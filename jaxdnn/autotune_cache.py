"""The autotuner's winners on disk: one JSON file of {"jaxdnn": version,
"entries": {problem key: {"choice": name, "times_ms": {...}}}}, shared by
the processes that use it. A file that cannot be read, or that another
jaxdnn version wrote, is ignored with a warning (and replaced on the next
write), never an error. Writes go through a temporary file and a rename,
after merging what is on disk, so concurrent writers lose at most their
own newest entry."""

from __future__ import annotations

import json
import os
import tempfile
import warnings

from jaxdnn import __version__ as VERSION

_memory: dict[str, dict] = {}


def _read(path: str) -> dict[str, dict]:
  try:
    with open(path) as f:
      data = json.load(f)
  except FileNotFoundError:
    return {}
  except (OSError, ValueError) as e:
    warnings.warn(f"jaxdnn autotune cache {path} is unreadable ({e}): ignored", stacklevel=3)
    return {}
  if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
    warnings.warn(f"jaxdnn autotune cache {path} is not an autotune cache: ignored", stacklevel=3)
    return {}
  if data.get("jaxdnn") != VERSION:
    warnings.warn(
      f"jaxdnn autotune cache {path} was written by jaxdnn {data.get('jaxdnn')!r}, this is "
      f"{VERSION}: stale, ignored (the next winner replaces it)",
      stacklevel=3,
    )
    return {}
  return {k: v for k, v in data["entries"].items() if isinstance(v, dict)}


def lookup(key: str, path: str | None) -> dict | None:
  """The entry for `key`: this process's, else the file's."""
  if key in _memory:
    return _memory[key]
  if path is not None:
    entry = _read(path).get(key)
    if entry is not None:
      _memory[key] = entry
      return entry
  return None


def store(key: str, entry: dict, path: str | None) -> None:
  _memory[key] = entry
  if path is None:
    return
  with warnings.catch_warnings():  # lookup already warned about this file
    warnings.simplefilter("ignore")
    entries = _read(path) if os.path.exists(path) else {}
  entries[key] = entry
  folder = os.path.dirname(os.path.abspath(path))
  tmp = None
  try:
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".autotune-", suffix=".json")
    with os.fdopen(fd, "w") as f:
      json.dump({"jaxdnn": VERSION, "entries": entries}, f, indent=1, sort_keys=True)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
  except (OSError, TypeError, ValueError) as e:
    warnings.warn(f"jaxdnn autotune cache {path} could not be written ({e})", stacklevel=3)
    if tmp is not None and os.path.exists(tmp):
      os.unlink(tmp)


def forget() -> None:
  """Drops this process's entries (tests; a new cache file)."""
  _memory.clear()
