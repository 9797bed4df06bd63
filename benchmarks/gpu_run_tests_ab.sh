#!/usr/bin/env bash
# One device call: build, the GPU tests (-k gpu, xdist), then GPU-busy A/Bs
# through jax of switches that the self-tests left open (each a separate
# process: switches are read once): the fused backward forced at seq 2048
# (JAXDNN_ATTENTION_SM90_BWD=2) and the dynamic forward scheduler on every
# causal case (JAXDNN_ATTENTION_SM90_DYNAMIC=1 vs 0) at seq 4096-16384.
#   bash benchmarks/gpu_run_tests_ab.sh OUTDIR
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
budget=${BUDGET:-570}
left() { local l=$((budget - SECONDS)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
( cd "$repo" && python3 -m pip install --no-build-isolation --no-deps . ) > "$out/build.log" 2>&1 \
  || { tail -30 "$out/build.log"; exit 1; }
xdist=""; python3 -c "import xdist" 2> /dev/null && xdist="-n 14"
echo "== GPU tests"
( cd /tmp && timeout "$(left ${TEST_TIMEOUT:-330})" python3 -m pytest "$repo/tests" -q -p no:cacheprovider $xdist \
    -k "${TEST_K:-gpu}" -rfE --timeout 150 ) > "$out/tests-gpu.log" 2>&1
echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-gpu.log" | head -20; tail -1 "$out/tests-gpu.log"
kt() {  # name, env..., -- kernel_timing args
  local name=$1; shift
  [ $((budget - SECONDS)) -lt 30 ] && { echo "$name: skipped (time)"; return; }
  ( cd /tmp && env "$@" timeout "$(left 120)" python3 "$repo/benchmarks/kernel_timing.py" --attention \
      ${KT_ARGS[@]} --out "$out/kt-$name.json" ) 2>&1 | grep -E "^attn" > "$out/kt-$name.txt"
  echo "-- $name"; cut -c1-120 "$out/kt-$name.txt"
}
KT_ARGS=(--seqs 2048 --impls jaxdnn --causal 0,1); kt bwd-default A=1; kt bwd-fused JAXDNN_ATTENTION_SM90_BWD=2
KT_ARGS=(--seqs 4096,8192,16384 --impls jaxdnn --causal 1); kt dyn-off JAXDNN_ATTENTION_SM90_DYNAMIC=0
kt dyn-on JAXDNN_ATTENTION_SM90_DYNAMIC=lpt
