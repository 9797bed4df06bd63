#!/usr/bin/env bash
# One device call for the norms: build, the norm tests (GPU ones included),
# optionally a slice of the attention tests (ATTN_K="pytest -k expression"),
# then the kernels named in NORM_AB (space-separated VAR=value; none by
# default), each one's tests with its switch on
# and an A/B (host-timed and GPU-busy) against no switch, XLA in each process
# as the drift reference. Then the benchmark over the default cases if 120 s
# of the budget are left.
# Every step is capped so the script ends by BUDGET seconds (default 540:
# one device call is at most 600 s). Everything goes to the folder given.
#   bash benchmarks/gpu_run_norms.sh OUTDIR
source "$(dirname "$0")/device_call.sh" 540 "$@"
# pytest-xdist, where installed, splits the switched-on tests over 4 processes.
xdist=""; python3 -c "import xdist" 2> /dev/null && xdist="-n 4"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh"
echo "== build"
( cd "$repo" && time python3 -m pip install --no-build-isolation --no-deps -v . ) > "$out/build.log" 2>&1 \
  || { tail -50 "$out/build.log"; exit 1; }
grep -E "Successfully" "$out/build.log" | tail -1
echo "== norm tests"
( cd /tmp && timeout "$(left "${TEST_TIMEOUT:-200}")" python3 -m pytest "$repo/tests/test_norms.py" \
    "$repo/tests/test_sharding.py" -q -p no:cacheprovider ) > "$out/tests-norms.log" 2>&1
echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-norms.log" | head -20; tail -1 "$out/tests-norms.log"
if [ -n "${ATTN_K:-}" ]; then
  echo "== attention tests (-k $ATTN_K)"
  ( cd /tmp && timeout "$(left "${ATTN_TIMEOUT:-150}")" python3 -m pytest "$repo/tests/test_attention.py" -q \
      -p no:cacheprovider -k "$ATTN_K" ) > "$out/tests-attention.log" 2>&1
  echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-attention.log" | head -20
  tail -1 "$out/tests-attention.log"
fi
# The opt-in kernels not yet timed on a GPU (NORM_AB: space-separated
# VAR=value switches; empty for none): each one's norm tests with its switch
# on, then one benchmark process with no switch and one per switch (a switch
# is read once per process) over the same cases, XLA as the drift reference.
norm_ab=${NORM_AB-}
for sw in $norm_ab; do
  echo "== $sw: tests"
  ( cd /tmp && env "$sw" timeout "$(left "${SWITCH_TEST_TIMEOUT:-120}")" python3 -m pytest \
      "$repo/tests/test_norms.py" -q -p no:cacheprovider $xdist -k "gpu or forward or residual or gradients" ) \
    > "$out/tests-${sw#*=}.log" 2>&1
  echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-${sw#*=}.log" | head -10
  tail -1 "$out/tests-${sw#*=}.log"
done
for sw in ${norm_ab:+A=default} $norm_ab; do
  name=${sw#*=}
  ( cd /tmp && env "$sw" timeout "$(left "${AB_TIMEOUT:-100}")" python3 -m jaxdnn.bench norms \
      --cases "${AB_CASES:-32768x4096,8192x8192}" --impls xla --gpu-busy --out "$out/norms-ab-$name.json" ) \
    > "$out/bench-ab-$name.txt" 2>&1
  echo "-- A/B $name (exit $?)"
  grep -E "ceiling| (fwd|bwd|bwd_kernel) +(jaxdnn|xla)" "$out/bench-ab-$name.txt" | cut -c1-150 | head -24
done
if [ $((budget - SECONDS)) -ge 120 ]; then
  echo "== benchmark (default kernels, all cases and anchors; $((budget - SECONDS)) s left)"
  ( cd /tmp && timeout "$(left "${BENCH_TIMEOUT:-240}")" python3 -m jaxdnn.bench norms \
      --gpu-busy --out "$out/norms.json" ) \
    > "$out/bench.txt" 2>&1
  grep -E "ceiling|fwd |bwd |bwd_kernel" "$out/bench.txt" | grep -E "ceiling|jaxdnn|32768x4096|8192x8192" \
    | grep -E "ceiling|jaxdnn" | head -30
else
  echo "== benchmark skipped: $((budget - SECONDS)) s left of ${budget}"
fi
