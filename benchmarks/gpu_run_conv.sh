#!/usr/bin/env bash
# One device call for issue 25 (and issue 23's grid A/Bs): the CUTLASS sm90
# convolution self-test built while jaxdnn builds, then run (check and
# bench), then gpu_run.sh's steps in STEPS (default: norms_grid conv).
# Needs the nvidia-cutlass wheel in .whl/ (carry [".whl"]).
#   bash benchmarks/gpu_run_conv.sh OUT
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/anchor-site "$repo"/.whl/*.whl
export PYTHONPATH=/tmp/anchor-site${PYTHONPATH:+:$PYTHONPATH}
( OUT=/tmp/conv-selftest STAGE=build bash "$repo/tests/cuda/conv/build_and_run.sh" > "$out/conv_selftest.txt" 2>&1 ) &
builder=$!
STEPS=build BUDGET=300 bash "$repo/benchmarks/gpu_run.sh" "$out"
wait $builder
echo "== CUTLASS sm90 conv self-test"
( OUT=/tmp/conv-selftest STAGE=run timeout 120 bash "$repo/tests/cuda/conv/build_and_run.sh" >> "$out/conv_selftest.txt" 2>&1 )
echo "self-test exit $?"
grep -E "PASS|FAIL|TFLOP|refused|built|error" "$out/conv_selftest.txt" | head -50
STEPS=${STEPS:-norms_grid conv} BUDGET=$((${BUDGET:-560} - SECONDS)) bash "$repo/benchmarks/gpu_run.sh" "$out"
rm -f "$out/build.log"
