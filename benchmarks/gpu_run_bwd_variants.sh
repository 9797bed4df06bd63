#!/usr/bin/env bash
# One device call for the fused backward's step-order variants
# (JAXDNN_ATTENTION_SM90_BWD_FUSED_VARIANT bits: 1 = 3 Q/dO stages and 1 dQ
# buffer, 2 = dQ before dK's second half, 4 = TMA before lse/delta):
#   1. jaxdnn builds in the background while the self-tests (carried in
#      build/sm90, built here by build_sm90_selftests.sh) check every variant
#      against the fp32 reference, unordered (atomiccheck) and ordered with
#      bitwise reruns (fusedcheck), then time them (atomic: the default path);
#   2. the GPU tests (TEST_K, default "gpu": every GPU test);
#   3. GPU-busy A/Bs through jax (benchmarks/kernel_timing.py), VARIANTS
#      ("variant:head_dim" pairs) over SEQS, one process per setting;
#   4. EXTRA: one more command line (e.g. the norm benchmark) if set.
#   bash benchmarks/gpu_run_bwd_variants.sh OUTDIR
source "$(dirname "$0")/device_call.sh" 570 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh"
build_jaxdnn &
b=${BIN:-$repo/build/sm90}
st() {  # log name, timeout, mode
  timeout "$(left "$2")" "$b/sm90_attention_bwd_selftest" "$3" > "$out/$1.log" 2>&1
  echo "$1: exit $?; $(grep -c FAIL "$out/$1.log") FAIL lines; $(grep -c 'ALL PASSED' "$out/$1.log") ALL PASSED"
}
if [ "${SELF:-1}" != 0 ]; then  # SELF=0: no self-tests
  st self-atomiccheck 90 atomiccheck
  st self-fusedcheck 120 fusedcheck
  grep -q "ALL PASSED" "$out/self-atomiccheck.log" && st self-atomic-timing "${SELF_TIMING_TIMEOUT:-150}" atomic
  grep -E "^\(|unordered variants" "$out/self-atomic-timing.log" 2> /dev/null | cut -c1-200 | head -60
fi
wait; cat "$out/build.rc"
xdist=""; python3 -c "import xdist" 2> /dev/null && xdist="-n 14"
if [ "${TEST_TIMEOUT:-260}" != 0 ]; then
  echo "== GPU tests (-k ${TEST_K:-gpu})"
  ( cd /tmp && timeout "$(left "${TEST_TIMEOUT:-260}")" python3 -m pytest "$repo/tests" -q -p no:cacheprovider \
      $xdist -k "${TEST_K:-gpu}" -rfE --timeout 150 ) > "$out/tests-gpu.log" 2>&1
  echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-gpu.log" | head -20; tail -1 "$out/tests-gpu.log"
fi
# VARIANTS: "variant:dim ..." pairs (default 0 and 6 at head dims 128 and 64).
for vd in ${VARIANTS:-0:128 0:64 6:128 6:64}; do
  v=${vd%:*} d=${vd#*:}
  {
    [ $((budget - SECONDS)) -lt 40 ] && { echo "v$v d$d: skipped (time)"; continue; }
    ( cd /tmp && JAXDNN_ATTENTION_SM90_BWD_FUSED_VARIANT=$v timeout "$(left 120)" python3 \
        "$repo/benchmarks/kernel_timing.py" --attention --dim "$d" --seqs "${SEQS:-2048,8192}" --causal 0,1 \
        --impls jaxdnn --out "$out/kt-v$v-d$d.json" ) 2>&1 | grep -E "^attn" > "$out/kt-v$v-d$d.txt"
    echo "-- variant $v, d$d"; cut -c1-140 "$out/kt-v$v-d$d.txt"
  }
done
if [ -n "${EXTRA:-}" ]; then
  echo "== extra: $EXTRA"
  ( cd /tmp && timeout "$(left 300)" bash -c "$EXTRA" ) > "$out/extra.txt" 2>&1
  echo "exit $?"; tail -40 "$out/extra.txt" | cut -c1-170
fi
