"""Formatting and lint, as CI checks them: ruff (pyproject.toml) for Python,
clang-format (.clang-format) for C++/CUDA. Both tools come with the test extra."""

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _tracked(*patterns):
  out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True)
  return [f for f in out.stdout.split() if (ROOT / f).exists()]


def _run(cmd):
  return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed")
def test_python_is_ruff_clean():
  lint = _run(["ruff", "check", "."])
  assert lint.returncode == 0, lint.stdout[-4000:]
  fmt = _run(["ruff", "format", "--check", "."])
  assert fmt.returncode == 0, fmt.stdout[-4000:] + "\n(run: ruff format .)"


@pytest.mark.skipif(shutil.which("clang-format") is None, reason="clang-format is not installed")
def test_cpp_is_clang_formatted():
  if not (ROOT / ".git").exists():
    pytest.skip("not a git checkout")
  files = _tracked("*.h", "*.cc", "*.cu", "*.cuh", "*.inc")
  assert files
  fmt = _run(["clang-format", "--dry-run", "--Werror", *files])
  assert fmt.returncode == 0, fmt.stderr[-4000:] + "\n(run: clang-format -i on these files)"
