#!/usr/bin/env bash
# Runs the standalone sm90 attention self-tests on a GPU machine from
# binaries built beforehand by benchmarks/build_sm90_selftests.sh (carry the
# folder), each under a timeout; logs and a summary go to OUT.
#   bash benchmarks/gpu_selftests_sm90.sh OUT [BINDIR]
# NEW_ONLY=1 runs only the self-tests of code not yet run on a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?give an output folder}
bin=${2:-build/sm90}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
# DEADLINE (seconds since the script started) caps every step, so a hang in
# one self-test cannot push the whole device call past its limit.
deadline=${DEADLINE:-100000}
run() {  # log name, timeout, command...
  local log=$1 limit=$2; shift 2
  local left=$((deadline - SECONDS))
  [ "$left" -lt "$limit" ] && limit=$left
  [ "$limit" -le 5 ] && { echo "$log: skipped, past the deadline"; return; }
  timeout "$limit" "$@" > "$out/$log.log" 2>&1
  local rc=$?
  echo "$log: exit $rc; $(grep -ciE 'FAIL' "$out/$log.log") lines with FAIL"
  tail -4 "$out/$log.log" | sed 's/^/    /'
}
b=$bin
# ---- The dynamic scheduler's early claim (JAXDNN_ATTENTION_SM90_DYNAMIC_CLAIM=early:
# the next tile claimed right after the current one's Q load; the default
# claims after its last K/V load): the causal A/B (variants 1, 3, 9, 25:
# checked, rerun bit-identical, TFLOP/s), then the extended cases with their
# packed-document timings, to compare with the default runs below.
[ -x "$b/sm90_attention_selftest" ] &&
  run forward-dynamic-ab-early-bf16 300 env JAXDNN_ATTENTION_SM90_DYNAMIC_CLAIM=early "$b/sm90_attention_selftest" bf16 ab
[ -x "$b/sm90_attention_ext_selftest" ] &&
  run ext-dynamic-early-bf16 420 env JAXDNN_ATTENTION_SM90_DYNAMIC_CLAIM=early "$b/sm90_attention_ext_selftest" bf16
[ -n "${NEW_ONLY:-}" ] && exit 0
# ---- Checked on an H200 (2026-11-22): regression runs.
# The forward's dynamic tile scheduler (late claim; default for short
# uneven tiles): every dense case in it, the causal A/B, the extended cases.
[ -x "$b/sm90_attention_selftest" ] && {
  run forward-dynamic-bf16 240 "$b/sm90_attention_selftest" bf16 9
  run forward-dynamic-ab-bf16 300 "$b/sm90_attention_selftest" bf16 ab; }
[ -x "$b/sm90_attention_ext_selftest" ] && run ext-dynamic-bf16 420 "$b/sm90_attention_ext_selftest" bf16
# The split-KV decode forward: checks, determinism, then timings (TB/s over K/V).
[ -x "$b/decode_split_selftest" ] && run decode-split 120 "$b/decode_split_selftest" all
# Head dim 256 in the two-kernel backward: masked and dense checks,
# determinism, then the d256 timing grid.
[ -x "$b/sm90_attention_bwd_selftest" ] && run backward-d256 150 "$b/sm90_attention_bwd_selftest" d256
# The fused backward's unordered dQ mode (deterministic=False): checks
# first, timings against the ordered fused and the two-kernel one if they pass.
[ -x "$b/sm90_attention_bwd_selftest" ] && {
  run backward-atomic-check 90 "$b/sm90_attention_bwd_selftest" atomiccheck
  grep -q "ALL PASSED" "$out/backward-atomic-check.log" &&
    run backward-atomic-timing 120 "$b/sm90_attention_bwd_selftest" atomic; }
[ -x "$b/sm90_attention_selftest" ] && for dt in bf16 f16; do
  run "forward-$dt" 240 "$b/sm90_attention_selftest" "$dt"; done
[ -x "$b/sm90_attention_bwd_selftest" ] && run backward 200 "$b/sm90_attention_bwd_selftest" all
# The masked (extended) path of the two-kernel backward: lengths, bottom-right
# causal, windows, segment ids, softcap; then a packed-document timing.
[ -x "$b/sm90_attention_bwd_selftest" ] && run backward-ext 240 "$b/sm90_attention_bwd_selftest" ext
[ -x "$b/sm90_attention_ext_selftest" ] && {
  run ext-gate 60 "$b/sm90_attention_ext_selftest" gate
  for dt in bf16 f16; do run "ext-$dt" 360 "$b/sm90_attention_ext_selftest" "$dt"; done; }
# The fused backward (ordered dQ): correctness and determinism, then timings.
[ -x "$b/sm90_attention_bwd_selftest" ] && {
  run backward-fused-check 150 "$b/sm90_attention_bwd_selftest" fusedcheck
  grep -q "ALL PASSED" "$out/backward-fused-check.log" &&
    run backward-fused-timing 300 "$b/sm90_attention_bwd_selftest" fused; }
exit 0
