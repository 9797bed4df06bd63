#!/usr/bin/env bash
# Build jaxdnn on a GPU machine, run the whole test suite (GPU tests included)
# and the benchmarks, and write everything to the folder given (default $OUT).
#   bash benchmarks/gpu_run.sh OUTDIR [pytest args...]
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
shift || true
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/device.txt"
python3 -c "import jax, jaxlib; print('jax', jax.__version__, jax.devices())" | tee -a "$out/device.txt"

echo "== build"
( cd "$repo" && time python3 -m pip install --no-build-isolation --no-deps -v . ) > "$out/build.log" 2>&1 \
  || { tail -50 "$out/build.log"; exit 1; }
grep -E "EXIT|Successfully" "$out/build.log" | tail -2

echo "== tests"
# Run from outside the source tree so the installed package is imported.
( cd /tmp && timeout 420 python3 -m pytest "$repo/tests" -q -x -p no:cacheprovider "$@" ) \
  > "$out/tests.log" 2>&1
echo "pytest exit $?"; tail -5 "$out/tests.log"

echo "== benchmarks"
( cd /tmp && timeout 300 python3 -m jaxdnn.bench norms --out "$out/norms.json" ) 2>&1 | tee "$out/bench.txt"
