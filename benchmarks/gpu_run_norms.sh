#!/usr/bin/env bash
# One device call for the norms: build, the norm tests (GPU ones included),
# the benchmark over the default cases, then the opt-in column-stationary
# forward (JAXDNN_NORM_FWD=columns): its GPU tests and an A/B benchmark in
# the same session. Optionally a slice of the attention tests
# (ATTN_K="pytest -k expression"). Everything goes to the folder given.
#   bash benchmarks/gpu_run_norms.sh OUTDIR
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false

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
( cd /tmp && timeout ${TEST_TIMEOUT:-200} python3 -m pytest "$repo/tests/test_norms.py" \
    "$repo/tests/test_sharding.py" -q -p no:cacheprovider ) > "$out/tests-norms.log" 2>&1
echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-norms.log" | head -20; tail -1 "$out/tests-norms.log"
if [ -n "${ATTN_K:-}" ]; then
  echo "== attention tests (-k $ATTN_K)"
  ( cd /tmp && timeout ${ATTN_TIMEOUT:-150} python3 -m pytest "$repo/tests/test_attention.py" -q \
      -p no:cacheprovider -k "$ATTN_K" ) > "$out/tests-attention.log" 2>&1
  echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-attention.log" | head -20
  tail -1 "$out/tests-attention.log"
fi
echo "== benchmark"
( cd /tmp && timeout ${BENCH_TIMEOUT:-240} python3 -m jaxdnn.bench norms --out "$out/norms.json" ) \
  > "$out/bench.txt" 2>&1
grep -E "ceiling|fwd |bwd |bwd_kernel" "$out/bench.txt" | grep -E "ceiling|jaxdnn|32768x4096|8192x8192" \
  | grep -E "ceiling|jaxdnn" | head -30
# The opt-in shared-memory backward (JAXDNN_NORM_BWD=smem): its GPU tests,
# then the two backwards timed one process each (the switch is read once per
# process), xla as the in-process anchor. This step and the later ones are
# capped so the script ends by BUDGET seconds; NORM_BWD_AB=0 skips it.
budget=${BUDGET:-540}
left() { local l=$((budget - SECONDS)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
if [ "${NORM_BWD_AB:-1}" != 0 ]; then
  echo "== shared-memory backward (JAXDNN_NORM_BWD=smem): tests, then A/B"
  ( cd /tmp && JAXDNN_NORM_BWD=smem timeout "$(left "${BWD_TEST_TIMEOUT:-150}")" python3 -m pytest \
      "$repo/tests/test_norms.py" -q -p no:cacheprovider -k "gpu or gradients" ) > "$out/tests-bwd-smem.log" 2>&1
  echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-bwd-smem.log" | head -10; tail -1 "$out/tests-bwd-smem.log"
  for bwd in ring smem; do
    ( cd /tmp && JAXDNN_NORM_BWD=$bwd timeout "$(left "${BWD_AB_TIMEOUT:-100}")" python3 -m jaxdnn.bench norms \
        --cases 32768x4096,8192x8192 --impls xla --out "$out/norms-bwd-$bwd.json" ) > "$out/bench-bwd-$bwd.txt" 2>&1
    echo "-- JAXDNN_NORM_BWD=$bwd: exit $?"
    grep -E "ceiling| (bwd|bwd_kernel) +jaxdnn" "$out/bench-bwd-$bwd.txt" | head -10
  done
fi
echo "== column-stationary forward (JAXDNN_NORM_FWD=columns): tests, then A/B"
( cd /tmp && JAXDNN_NORM_FWD=columns timeout "$(left "${TEST_TIMEOUT:-200}")" python3 -m pytest \
    "$repo/tests/test_norms.py" -q -p no:cacheprovider -k "gpu or gradients" ) > "$out/tests-columns.log" 2>&1
echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-columns.log" | head -10; tail -1 "$out/tests-columns.log"
( cd /tmp && JAXDNN_NORM_FWD=columns timeout "$(left "${AB_TIMEOUT:-150}")" python3 -m jaxdnn.bench norms \
    --cases 32768x4096,8192x8192 --out "$out/norms-columns.json" ) > "$out/bench-columns.txt" 2>&1
grep -E " fwd .*(jaxdnn|xla|torch|tokamax)" "$out/bench-columns.txt" | head -16
