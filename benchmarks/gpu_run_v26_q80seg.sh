#!/usr/bin/env bash
# One device call for the 80-query segment steps of the fused backward
# (variant 404, JAXDNN_ATTENTION_SM90_BWD_Q80_SEG=1; NOTES.md attention v26):
#   1. jaxdnn builds in the background while the self-tests (carried in
#      build/sm90, built here by build_sm90_selftests.sh) check it: `seg`
#      (both dQ modes, the unordered one also with variant 404, then the
#      timing case 64- vs 80-query steps vs the two-kernel backward) and
#      `atomiccheck` (dense and segment cases, unordered);
#   2. the GPU tests named by TEST_K, with the switch on;
#   3. packed documents through jax, the default against the switch on,
#      alternating processes.
#   bash benchmarks/gpu_run_v26_q80seg.sh OUTDIR   (carry .whl and build/sm90)
source "$(dirname "$0")/device_call.sh" 570 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh" > /dev/null 2>&1
build_jaxdnn &
b=${BIN:-$repo/build/sm90}
for mode in seg atomiccheck; do
  timeout "$(left 150)" "$b/sm90_attention_bwd_selftest" "$mode" > "$out/self-$mode.log" 2>&1
  echo "self-test $mode: exit $?; $(grep -c FAIL "$out/self-$mode.log") FAIL lines;" \
       "$(grep -c 'ALL PASSED' "$out/self-$mode.log") ALL PASSED"
done
grep -E "FAIL" "$out/self-seg.log" | head -10 | cut -c1-200
grep -iE "tflop|fused|two-kernel" "$out/self-seg.log" | grep TIMING | cut -c1-240
wait; cat "$out/build.rc"
echo "== GPU tests, JAXDNN_ATTENTION_SM90_BWD_Q80_SEG=1 (-k ${TEST_K:=gpu and (packed or segments)})"
gpu_tests "${TEST_TIMEOUT:-180}" "$TEST_K" JAXDNN_ATTENTION_SM90_BWD_Q80_SEG=1
packed_ab A=default JAXDNN_ATTENTION_SM90_BWD_Q80_SEG=1
