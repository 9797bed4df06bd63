#!/usr/bin/env bash
# One device call (~10 min) that checks the kernels written but not yet run on
# a GPU, then through jax with their switches on: carry build/sm90 (built here
# by benchmarks/build_sm90_selftests.sh) and .whl.
#   bash benchmarks/gpu_verify_new.sh OUTDIR
# Steps, each under its own timeout, results under OUTDIR:
#   1. jaxdnn builds in the background while the new-code self-tests run
#      (gpu_selftests_sm90.sh with NEW_ONLY=1);
#   2. attention_gpu_check.py with every opt-in switch on;
#   3. the GPU attention tests that reach the new paths (decode shapes, head
#      dim 256, causal), switches on;
#   4. the attention benchmark at head dim 128 (dense, decode) with the
#      switches on, for the A/B against the last committed run.
source "$(dirname "$0")/device_call.sh" 570 "$@"
build_jaxdnn &
# Every step is capped so the whole script ends by BUDGET seconds (one device
# call is at most 600 s).
NEW_ONLY=1 DEADLINE=$((budget - 200)) bash "$repo/benchmarks/gpu_selftests_sm90.sh" "$out/self" "${BIN:-build/sm90}"
wait; cat "$out/build.rc"
# The opt-in switches of the kernels under test, for the jax steps below (the
# self-tests above pick their variants themselves), e.g.
# VERIFY_SWITCHES="JAXDNN_ATTENTION_SM90_DYNAMIC=1".
[ -n "${VERIFY_SWITCHES:-}" ] && export ${VERIFY_SWITCHES?} && echo "switches: $VERIFY_SWITCHES"
xdist=""; python3 -c "import xdist" 2> /dev/null && xdist="-n 14"
echo "== jax self-check, switches on"
( cd /tmp && timeout "$(left "${CHECK_TIMEOUT:-300}")" python3 "$repo/benchmarks/attention_gpu_check.py" ) > "$out/check.txt" 2>&1
echo "exit $?: $(grep -c '^ok' "$out/check.txt") ok, $(grep -vc '^ok\|WARN' "$out/check.txt") other lines"
grep -vE "^ok|WARN" "$out/check.txt" | tail -5
echo "== GPU tests reaching the new paths"
( cd /tmp && timeout "$(left "${TEST_TIMEOUT:-240}")" python3 -m pytest "$repo/tests/test_attention.py" -q -p no:cacheprovider \
    $xdist -k "${TEST_K:-gpu and (decode or 384 or causal or deterministic or segment or window or packed)}" ) \
    > "$out/tests.log" 2>&1
echo "pytest exit $?"; grep -E "^FAILED|passed|failed" "$out/tests.log" | head -12
source "$repo/benchmarks/tokamax_site.sh"
echo "== benchmark, switches on"
( cd /tmp && timeout "$(left "${BENCH_TIMEOUT:-240}")" python3 -m jaxdnn.bench attention --dims 128 --seqs 2048,4096,8192 \
    --only dense,decode --no-torch --out "$out/attention.json" ) 2>&1 | grep -v WARN > "$out/bench.txt"
grep -E "jaxdnn|cudnn|geomean" "$out/bench.txt"
