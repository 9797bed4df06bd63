#!/usr/bin/env bash
# Build jaxdnn on a GPU machine, self-check and test attention (and the rest of
# the suite), then benchmark attention; everything goes to the folder given.
#   bash benchmarks/gpu_run_attention.sh OUTDIR [bench args...]
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
shift || true
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false

source "$repo/benchmarks/tokamax_site.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/device.txt"
echo "== build"
[ -n "${SKIP_BUILD:-}" ] || ( cd "$repo" && time python3 -m pip install --no-build-isolation --no-deps -v . ) > "$out/build.log" 2>&1 \
  || { tail -50 "$out/build.log"; exit 1; }
[ -n "${SKIP_BUILD:-}" ] || grep -E "registers|Successfully" "$out/build.log" | tail -3
echo "== self-check"
[ "${CHECK_TIMEOUT:-400}" != 0 ] && ( cd /tmp && timeout ${CHECK_TIMEOUT:-400} python3 "$repo/benchmarks/attention_gpu_check.py" ) 2>&1 | tee "$out/check.txt"
echo "== tests"
[ "${TEST_TIMEOUT:-240}" != 0 ] && ( cd /tmp && timeout ${TEST_TIMEOUT:-240} python3 -m pytest "$repo/tests" -q -p no:cacheprovider \
    ${TESTS:-} ) > "$out/tests.log" 2>&1
echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests.log" | head -30; tail -2 "$out/tests.log"
echo "== benchmarks"
( cd /tmp && timeout ${BENCH_TIMEOUT:-300} python3 -m jaxdnn.bench attention --out "$out/attention.json" "$@" ) \
  2>&1 | tee "$out/bench.txt"
