#!/usr/bin/env bash
# One device call for issue 25: the CUTLASS sm90 convolution self-tests
# (forward and gradients) built while jaxdnn builds, or taken prebuilt from
# SELFTEST_DIR (build/conv-selftests, carried: `STAGE=build
# OUT=build/conv-selftests bash tests/cuda/conv/build_and_run.sh` on a
# development machine), then run: check, SANITIZE (default 1: memcheck and
# racecheck of the check modes) and bench; then gpu_run.sh's steps in STEPS
# (default: tests conv). Needs the nvidia-cutlass wheel in .whl/ (carry
# [".whl"]). SELFTEST_SECONDS bounds the self-test stage (default 240).
#   bash benchmarks/gpu_run_conv.sh OUT
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/anchor-site "$repo"/.whl/*.whl
export PYTHONPATH=/tmp/anchor-site${PYTHONPATH:+:$PYTHONPATH}
bins=${SELFTEST_DIR:-}
builder=
if [ -z "$bins" ]; then
  bins=/tmp/conv-selftest
  ( OUT=$bins STAGE=build bash "$repo/tests/cuda/conv/build_and_run.sh" > "$out/conv_selftest.txt" 2>&1 ) &
  builder=$!
fi
STEPS=build BUDGET=300 bash "$repo/benchmarks/gpu_run.sh" "$out"
[ -n "$builder" ] && wait $builder
echo "== CUTLASS sm90 conv self-tests"
( OUT=$bins STAGE=run SANITIZE=${SANITIZE-1} timeout "${SELFTEST_SECONDS:-240}" \
    bash "$repo/tests/cuda/conv/build_and_run.sh" >> "$out/conv_selftest.txt" 2>&1 )
echo "self-test exit $?"
cp "$bins"/*_memcheck.log "$bins"/*_racecheck.log "$out/" 2>/dev/null
grep -E "PASS|FAIL|TFLOP|refused|built|error|clean|exit|==|--" "$out/conv_selftest.txt" | head -80
STEPS=${STEPS:-tests conv} BUDGET=$((${BUDGET:-560} - SECONDS)) bash "$repo/benchmarks/gpu_run.sh" "$out"
rm -f "$out/build.log"
