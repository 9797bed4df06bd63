"""jaxdnn.autotune() / jaxdnn.config.benchmark for conv: candidates timed once
per problem with a progress line, the winner run and kept in a versioned
cache file that a second process reuses; unreadable or stale files warn and
are replaced, never an error; conv_plan reports a known winner and times
nothing."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import assert_close, normal
from conftest import on_gpu

import jaxdnn
from jaxdnn import autotune_cache
from jaxdnn.conv import autotune


@pytest.fixture(autouse=True)
def fresh_memory():
  autotune_cache.forget()
  yield
  autotune_cache.forget()


# On a GPU the CUDA kernels take bfloat16 with channels a multiple of 8, so
# the problem there has more than one candidate to time.
DTYPE = jnp.bfloat16 if on_gpu() else jnp.float32
CHANNELS = (16, 8) if on_gpu() else (6, 5)
TOL = 2e-2 if on_gpu() else 2e-5


def _problem(rng):
  cin, cout = CHANNELS
  return (
    normal(rng, (2, 9, 8, cin), DTYPE),
    normal(rng, (3, 3, cin, cout), DTYPE, scale=0.2),
    normal(rng, (cout,)),
  )


def test_times_once_runs_the_winner_and_writes_the_cache(tmp_path, capfd):
  rng = np.random.default_rng(1)
  x, w, b = _problem(rng)
  path = tmp_path / "tune.json"
  f = lambda x, w, b: jaxdnn.conv(x, w, b, activation="relu")
  want = jaxdnn.conv(x, w, b, activation="relu", implementation="xla")
  with jaxdnn.autotune(cache=path):
    assert_close(jax.jit(f)(x, w, b), want, TOL)
    first = capfd.readouterr().err
    cin, cout = CHANNELS
    line = f"jaxdnn autotune: conv x[2x9x8x{cin}] w[3x3x{cin}x{cout}] {jnp.dtype(DTYPE).name}"
    assert line in first and "->" in first
    assert_close(jax.jit(lambda *a: f(*a) * 1.0)(x, w, b), want, TOL)  # a new trace
    assert "jaxdnn autotune" not in capfd.readouterr().err
    plan = jaxdnn.conv_plan(x, w, b, activation="relu")
    assert "jaxdnn.autotune (cached)" in plan["reason"], plan
    g = jax.grad(lambda w: jnp.sum(jnp.sin(f(x, w, b))))(w)
  data = json.loads(path.read_text())
  assert data["jaxdnn"] == jaxdnn.__version__ and len(data["entries"]) == 1
  (entry,) = data["entries"].values()
  # The gradient through the winner's own forward: ReLU's mask follows the
  # forward's rounding, so another algorithm's 16-bit output flips a few
  # near-zero outputs (F(2x2, 3x3) rounds differently from cuDNN's GEMMs).
  choice = dict(autotune.CANDIDATES)[entry["choice"]]
  g_want = jax.grad(lambda w: jnp.sum(jnp.sin(jaxdnn.conv(x, w, b, activation="relu", **choice))))(
    w
  )
  assert_close(g, g_want, 5e-2 if on_gpu() else 5e-5)
  assert entry["choice"] in entry["times_ms"] and "xla" in entry["times_ms"]
  # The CPU's kernels on float32; the GPU's implicit GEMM on bfloat16.
  want = {"implicit_gemm", "fft"} if on_gpu() else {"implicit_gemm", "winograd", "fft"}
  assert want <= set(entry["times_ms"]), entry
  assert not jaxdnn.config.benchmark  # restored


def test_a_second_process_reuses_the_winner(tmp_path):
  rng = np.random.default_rng(2)
  x, w, b = _problem(rng)
  path = tmp_path / "tune.json"
  with jaxdnn.autotune(cache=path):
    jaxdnn.conv(x, w, b)
  script = textwrap.dedent(
    f"""
    import jax.numpy as jnp, jaxdnn
    x = jnp.ones((2, 9, 8, {CHANNELS[0]}), "{jnp.dtype(DTYPE).name}")
    w = jnp.ones((3, 3, {CHANNELS[0]}, {CHANNELS[1]}), "{jnp.dtype(DTYPE).name}")
    b = jnp.ones(({CHANNELS[1]},))
    with jaxdnn.autotune(cache={str(path)!r}):
      jaxdnn.conv(x, w, b)
      print(jaxdnn.conv_plan(x, w, b)["reason"])
    """
  )
  out = subprocess.run(
    [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=os.environ
  )
  assert out.returncode == 0, out.stderr
  assert "jaxdnn.autotune (cached)" in out.stdout and "jaxdnn autotune: conv" not in out.stderr


@pytest.mark.parametrize(
  "text, match",
  [
    ("{not json", "unreadable"),
    (json.dumps([1, 2]), "not an autotune cache"),
    (json.dumps({"jaxdnn": "0.0.0", "entries": {}}), "stale"),
  ],
)
def test_unreadable_or_stale_files_warn_and_are_replaced(tmp_path, text, match):
  rng = np.random.default_rng(3)
  x, w, b = _problem(rng)
  path = tmp_path / "tune.json"
  path.write_text(text)
  with pytest.warns(UserWarning, match=match), jaxdnn.autotune(cache=path):
    y = jaxdnn.conv(x, w, b)
  assert_close(y, jaxdnn.conv(x, w, b, implementation="xla"), TOL)
  assert json.loads(path.read_text())["jaxdnn"] == jaxdnn.__version__


def test_plans_time_nothing_and_asked_algorithms_are_kept(tmp_path, capfd):
  rng = np.random.default_rng(4)
  x, w, b = _problem(rng)
  path = tmp_path / "tune.json"
  with jaxdnn.autotune(cache=path, deterministic=True):
    plan = jaxdnn.conv_plan(x, w, b)
    assert "autotune" not in plan["reason"] and not path.exists()
    assert jaxdnn.config.deterministic
    jaxdnn.conv(x, w, b, algorithm="implicit_gemm")
    jaxdnn.conv(x, w, b, implementation="xla")
    assert not path.exists() and "jaxdnn autotune" not in capfd.readouterr().err
  assert not jaxdnn.config.deterministic and not jaxdnn.config.benchmark


def test_timing_stays_out_of_the_callers_trace(tmp_path):
  rng = np.random.default_rng(5)
  x, w, b = _problem(rng)
  f = lambda x, w, b: jaxdnn.conv(x, w, b)
  with jaxdnn.autotune(cache=tmp_path / "tune.json"):
    text = str(jax.make_jaxpr(f)(x, w, b))
  assert "random" not in text and "threefry" not in text, text
  assert json.loads((tmp_path / "tune.json").read_text())["entries"]


def test_bad_entries_are_timed_again_and_deterministic_is_part_of_the_key(tmp_path, capfd):
  rng = np.random.default_rng(6)
  x, w, b = _problem(rng)
  path = tmp_path / "tune.json"
  with jaxdnn.autotune(cache=path):
    jaxdnn.conv(x, w, b)
  data = json.loads(path.read_text())
  (key,) = data["entries"]
  data["entries"][key] = {"choice": "fft"}
  path.write_text(json.dumps(data))
  autotune_cache.forget()
  capfd.readouterr()
  with jaxdnn.autotune(cache=path):
    y = jaxdnn.conv(x, w, b)
  assert "jaxdnn autotune: conv" in capfd.readouterr().err
  assert_close(y, jaxdnn.conv(x, w, b, implementation="xla"), TOL)
  with jaxdnn.autotune(cache=path, deterministic=True):
    jaxdnn.conv(x, w, b)
  assert len(json.loads(path.read_text())["entries"]) == 2
