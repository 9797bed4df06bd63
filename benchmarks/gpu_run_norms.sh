#!/usr/bin/env bash
# One device call for the norms: build, the norm tests (GPU ones included),
# then the opt-in one-pass LayerNorm statistics (JAXDNN_NORM_FWD=shifted;
# NORM_SHIFTED_AB=0 leaves it out) and, with NORM_FWD_AB=1 / NORM_BWD_AB=1,
# the other opt-in kernels: the warp-per-row forward
# (JAXDNN_NORM_FWD=warprows) and the shared-memory backward
# (JAXDNN_NORM_BWD=smem), each one's tests with its switch on, then an A/B
# (host-timed and GPU-busy, --gpu-busy):
# one benchmark process with both off and one per switch, same cases, XLA in
# each as the drift reference. Then the benchmark over the default cases if
# 120 s of the budget are left. Optionally a slice of the attention tests
# (ATTN_K="pytest -k expression") and, with COLUMNS_AB=1, the column-stationary
# forward's tests and A/B (JAXDNN_NORM_FWD=columns; slower on an H200).
# Every step is capped so the script ends by BUDGET seconds (default 540:
# one device call is at most 600 s). Everything goes to the folder given.
#   bash benchmarks/gpu_run_norms.sh OUTDIR
source "$(dirname "$0")/device_call.sh" 540 "$@"
# pytest-xdist, where installed, splits the switched-on tests over 4 processes.
xdist=""; python3 -c "import xdist" 2> /dev/null && xdist="-n 4"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/device.txt"
if [ -d "$repo/.whl" ] && ls "$repo"/.whl/tokamax-*.whl > /dev/null 2>&1; then
  # tokamax (the JAX-native peer) and its pure-Python dependencies travel as
  # wheels (carry .whl); a stand-in for the xprof module it imports for its
  # own profiling lets it load without xprof.
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$repo"/.whl/*.whl
  mkdir -p /tmp/site/xprof/cli/tools
  touch /tmp/site/xprof/__init__.py /tmp/site/xprof/cli/__init__.py
  echo "get_kernel_stats_tool = None" > /tmp/site/xprof/cli/tools/__init__.py
  export PYTHONPATH=/tmp/site
fi
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
# The opt-in kernels not yet timed on a GPU: each one's tests with its switch
# on, then one benchmark process per configuration (a switch is read once per
# process) over the same cases, XLA as the drift reference in each: both off,
# JAXDNN_NORM_FWD=warprows, JAXDNN_NORM_BWD=smem. Every process times the
# forward and the backward, so the run with both off is the baseline of both
# A/Bs. NORM_FWD_AB=0 / NORM_BWD_AB=0 leave a family out.
fwd_ab=${NORM_FWD_AB:-0}
bwd_ab=${NORM_BWD_AB:-0}
shifted_ab=${NORM_SHIFTED_AB:-1}
# The norm tests with one switch on: log name, VAR=value, seconds, -k expression.
switched_tests() {
  echo "== $2: tests"
  ( cd /tmp && env "$2" timeout "$(left "$3")" python3 -m pytest "$repo/tests/test_norms.py" -q \
      -p no:cacheprovider $xdist -k "$4" ) > "$out/tests-$1.log" 2>&1
  echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-$1.log" | head -10; tail -1 "$out/tests-$1.log"
}
fwd_k="gpu or forward or residual or gradients"
[ "$shifted_ab" != 0 ] && switched_tests shifted JAXDNN_NORM_FWD=shifted "${SHIFTED_TEST_TIMEOUT:-120}" "$fwd_k"
[ "$fwd_ab" != 0 ] && switched_tests warprows JAXDNN_NORM_FWD=warprows "${WARPROWS_TEST_TIMEOUT:-120}" "$fwd_k"
[ "$bwd_ab" != 0 ] && switched_tests bwd-smem JAXDNN_NORM_BWD=smem "${BWD_TEST_TIMEOUT:-150}" "gpu or gradients"
configs=""
[ "$shifted_ab" != 0 ] && configs="$configs fwd-shifted"
[ "$fwd_ab" != 0 ] && configs="$configs fwd-warprows"
[ "$bwd_ab" != 0 ] && configs="$configs bwd-smem"
[ -n "$configs" ] && configs="default$configs"
for c in $configs; do
  fwd=""; bwd=""
  case $c in fwd-warprows) fwd=warprows ;; fwd-shifted) fwd=shifted ;; bwd-smem) bwd=smem ;; esac
  ( cd /tmp && JAXDNN_NORM_FWD=$fwd JAXDNN_NORM_BWD=$bwd timeout "$(left "${AB_TIMEOUT:-100}")" \
      python3 -m jaxdnn.bench norms --cases "${AB_CASES:-32768x4096,8192x8192}" --impls xla --gpu-busy \
      --out "$out/norms-ab-$c.json" ) > "$out/bench-ab-$c.txt" 2>&1
  echo "-- A/B $c (exit $?)"
  grep -E "ceiling| (fwd|bwd|bwd_kernel) +(jaxdnn|xla)" "$out/bench-ab-$c.txt" | cut -c1-150 | head -24
done
if [ "${COLUMNS_AB:-0}" = 1 ]; then
  echo "== column-stationary forward (JAXDNN_NORM_FWD=columns): tests, then A/B"
  ( cd /tmp && JAXDNN_NORM_FWD=columns timeout "$(left "${TEST_TIMEOUT:-200}")" python3 -m pytest \
      "$repo/tests/test_norms.py" -q -p no:cacheprovider -k "gpu or gradients" ) > "$out/tests-columns.log" 2>&1
  echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-columns.log" | head -10; tail -1 "$out/tests-columns.log"
  ( cd /tmp && JAXDNN_NORM_FWD=columns timeout "$(left "${AB_TIMEOUT:-150}")" python3 -m jaxdnn.bench norms \
      --cases 32768x4096,8192x8192 --out "$out/norms-columns.json" ) > "$out/bench-columns.txt" 2>&1
  grep -E " fwd .*(jaxdnn|xla|torch|tokamax)" "$out/bench-columns.txt" | head -16
fi
if [ $((budget - SECONDS)) -ge 120 ]; then
  echo "== benchmark (default kernels, all cases and anchors; $((budget - SECONDS)) s left)"
  ( cd /tmp && JAXDNN_NORM_FWD=${BENCH_NORM_FWD:-} timeout "$(left "${BENCH_TIMEOUT:-240}")" python3 -m jaxdnn.bench norms \
      --gpu-busy --out "$out/norms.json" ) \
    > "$out/bench.txt" 2>&1
  grep -E "ceiling|fwd |bwd |bwd_kernel" "$out/bench.txt" | grep -E "ceiling|jaxdnn|32768x4096|8192x8192" \
    | grep -E "ceiling|jaxdnn" | head -30
else
  echo "== benchmark skipped: $((budget - SECONDS)) s left of ${budget}"
fi
