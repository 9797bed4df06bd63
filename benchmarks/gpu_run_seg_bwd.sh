#!/usr/bin/env bash
# One device call for the fused backward's segment-id path (packed documents):
#   1. jaxdnn builds in the background while the self-tests (carried in
#      build/sm90, built here by build_sm90_selftests.sh) check it: `seg`
#      (segment cases in both dQ modes, then its timing against the two-kernel
#      backward), `atomiccheck` and `fusedcheck` (dense and segment cases);
#   2. the GPU tests named by TEST_K (packed documents, segments, long and
#      deterministic backwards, and the norms by default);
#   3. packed documents through jax, the default against
#      JAXDNN_ATTENTION_SM90_BWD_FUSED_SEG=0 (the two-kernel backward),
#      alternating processes.
#   bash benchmarks/gpu_run_seg_bwd.sh OUTDIR   (carry .whl and build/sm90)
source "$(dirname "$0")/device_call.sh" 570 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh" > /dev/null 2>&1
build_jaxdnn &
b=${BIN:-$repo/build/sm90}
for mode in seg atomiccheck fusedcheck; do
  timeout "$(left 120)" "$b/sm90_attention_bwd_selftest" "$mode" > "$out/self-$mode.log" 2>&1
  echo "self-test $mode: exit $?; $(grep -c FAIL "$out/self-$mode.log") FAIL lines;" \
       "$(grep -c 'ALL PASSED' "$out/self-$mode.log") ALL PASSED"
done
grep -iE "tflop|fused|two-kernel" "$out/self-seg.log" | tail -12 | cut -c1-200
wait; cat "$out/build.rc"
echo "== GPU tests (-k ${TEST_K:=gpu and (packed or segments or long or deterministic or norm)})"
gpu_tests "${TEST_TIMEOUT:-240}" "$TEST_K"
packed_ab A=default JAXDNN_ATTENTION_SM90_BWD_FUSED_SEG=0
