#!/usr/bin/env bash
# One device call: build, the GPU tests (-k gpu, xdist; TEST_ENV="VAR=value
# ..." runs them with switches on), then GPU-busy A/Bs through jax
# (benchmarks/kernel_timing.py), each a separate process since switches are
# read once. AB lists them, separated by ";": "name|VAR=value ...|kernel_timing
# args". The default is the first use: the fused backward forced at seq 2048
# (JAXDNN_ATTENTION_SM90_BWD=2) and the dynamic forward scheduler on every
# causal case (JAXDNN_ATTENTION_SM90_DYNAMIC=lpt vs 0) at seq 4096-16384.
#   bash benchmarks/gpu_run_tests_ab.sh OUTDIR
source "$(dirname "$0")/device_call.sh" 570 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
( cd "$repo" && python3 -m pip install --no-build-isolation --no-deps . ) > "$out/build.log" 2>&1 \
  || { tail -30 "$out/build.log"; exit 1; }
xdist=""; python3 -c "import xdist" 2> /dev/null && xdist="-n 14"
if [ "${TEST_TIMEOUT:-330}" != 0 ]; then  # TEST_TIMEOUT=0: A/Bs only
  echo "== GPU tests"
  ( cd /tmp && env ${TEST_ENV:-A=1} timeout "$(left ${TEST_TIMEOUT:-330})" python3 -m pytest "$repo/tests" -q \
      -p no:cacheprovider $xdist -k "${TEST_K:-gpu}" -rfE --timeout 150 ) > "$out/tests-gpu.log" 2>&1
  echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-gpu.log" | head -20; tail -1 "$out/tests-gpu.log"
fi
kt() {  # name, "VAR=value ...", kernel_timing args
  local name=$1 envs=$2 args=$3
  [ $((budget - SECONDS)) -lt 30 ] && { echo "$name: skipped (time)"; return; }
  ( cd /tmp && env ${envs:-A=1} timeout "$(left 150)" python3 "$repo/benchmarks/kernel_timing.py" --attention \
      $args --out "$out/kt-$name.json" ) 2>&1 | grep -E "^attn" > "$out/kt-$name.txt"
  echo "-- $name ($envs)"; cut -c1-120 "$out/kt-$name.txt"
}
default_ab="bwd-default||--seqs 2048 --impls jaxdnn;bwd-fused|JAXDNN_ATTENTION_SM90_BWD=2|--seqs 2048 --impls jaxdnn"
default_ab="$default_ab;dyn-off|JAXDNN_ATTENTION_SM90_DYNAMIC=0|--seqs 4096,8192,16384 --impls jaxdnn --causal 1"
default_ab="$default_ab;dyn-on|JAXDNN_ATTENTION_SM90_DYNAMIC=lpt|--seqs 4096,8192,16384 --impls jaxdnn --causal 1"
IFS=';' read -ra specs <<< "${AB:-$default_ab}"
for spec in "${specs[@]}"; do
  IFS='|' read -r name envs args <<< "$spec"
  kt "$name" "$envs" "$args"
done
