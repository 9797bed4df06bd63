#!/usr/bin/env bash
# The GPU machine's run: build jaxdnn, run the whole test suite (GPU tests
# included), the CUDA self-tests (with compute-sanitizer), and the
# benchmarks, writing everything to OUT. One device call is at most 600 s, so
# STEPS picks what this call does (default: all, in this order):
#   build tests selftests norms attention softmax act loss cnn_norms pool upstream (and sweep, below)
#   bash benchmarks/gpu_run.sh OUT [pytest args...]
# SELFTEST_BIN: self-test binaries built beforehand (tests/cuda/run_selftests.sh).
# upstream: JAX's own attention tests (tests/upstream/), given JAX's
# tests/nn_test.py carried as build/upstream/nn_test.py.
# sweep: one benchmark process per SWEEP entry (space-separated entries of
# comma-separated VAR=value switches; "-" for none), `python -m jaxdnn.bench $SWEEP_FAMILY $SWEEP_ARGS`,
# a switch being read once per process.
# TESTS: the test paths (default: all of tests/). ATTENTION_ARGS: arguments of `python -m jaxdnn.bench attention` (default: the
# head-dim-128 grid, seq 512-16k). BUDGET: seconds this call may take (540).
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
shift || true
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
steps=" ${STEPS:-build tests selftests norms attention softmax act loss cnn_norms pool upstream} "
budget=${BUDGET:-540}
left() { local l=$((budget - SECONDS)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
has() { [[ "$steps" == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/device.txt"
python3 -c "import jax, jaxlib; print('jax', jax.__version__, jax.devices())" | tee -a "$out/device.txt"
[ -f "$repo/benchmarks/tokamax_site.sh" ] && source "$repo/benchmarks/tokamax_site.sh"

if has build; then
  echo "== build"
  ( cd "$repo" && time python3 -m pip install --no-build-isolation --no-deps -v . ) > "$out/build.log" 2>&1 \
    || { tail -50 "$out/build.log"; exit 1; }
  grep -E "Successfully installed" "$out/build.log" | tail -1
fi
if has tests; then
  echo "== tests"
  # From outside the source tree, so the installed package is imported; in
  # SHARDS processes side by side (the suite is bound by host-side compiles).
  # Shard logs outside OUT (a device call brings back few files), joined after;
  # -v, so a shard cut by the time limit still names every test it ran. The
  # whole suite needs about 15 minutes of an H200 at 6-8 shards (16 shards
  # contend and run slower): split it over calls with pytest arguments.
  shards=${SHARDS:-6}
  t=$(left 480)
  logs=$(mktemp -d)
  for i in $(seq 0 $((shards - 1))); do
    ( cd /tmp && TEST_SHARD=$i/$shards RESULTS_JSON=$logs/tables-$i.json timeout "$t" \
      python3 -m pytest ${TESTS:-$repo/tests} -v -p no:cacheprovider "$@" ) > "$logs/tests-$i.log" 2>&1 &
  done
  wait
  for i in $(seq 0 $((shards - 1))); do echo "== shard $i/$shards"; cat "$logs/tests-$i.log"; done > "$out/tests.log"
  python3 "$repo/tests/merge_tables.py" "$logs"/tables-*.json > "$out/tables.md" 2>&1
  grep -E "^FAILED|^ERROR" "$out/tests.log" | head -30
  for i in $(seq 0 $((shards - 1))); do
    echo "shard $i: $(grep -E "(passed|failed|error).* in [0-9.]+s" "$logs/tests-$i.log" | tail -1)"
  done
fi
if has selftests; then
  echo "== CUDA self-tests"
  DEADLINE=$((budget - 60)) SANITIZE=1 bash "$repo/tests/cuda/run_selftests.sh" "$out/selftests" \
    "${SELFTEST_BIN:-$repo/build/selftests}" 2>&1 | tee "$out/selftests.txt"
fi
if has norms; then
  echo "== norms benchmark"
  ( cd /tmp && timeout "$(left 240)" python3 -m jaxdnn.bench norms --gpu-busy --out "$out/norms.json" ) \
    > "$out/norms.txt" 2>&1
  grep -E "^(layer|rms)|ceiling" "$out/norms.txt" | head -60
fi
if has attention; then
  echo "== attention benchmark"
  ( cd /tmp && timeout "$(left 420)" python3 -m jaxdnn.bench attention --gpu-busy \
      ${ATTENTION_ARGS:---dims 128} --out "$out/attention.json" ) > "$out/attention.txt" 2>&1
  grep -vE "WARNING|warn|^ *tq, tk" "$out/attention.txt" | tail -60
fi
if has softmax; then
  echo "== softmax benchmark"
  ( cd /tmp && timeout "$(left 300)" python3 -m jaxdnn.bench softmax --gpu-busy --out "$out/softmax.json" ) \
    > "$out/softmax.txt" 2>&1
  grep -E "^(softmax|log_|cross)|ceiling" "$out/softmax.txt" | head -60
fi
if has act; then
  echo "== activations benchmark"
  ( cd /tmp && timeout "$(left 300)" python3 -m jaxdnn.bench act --gpu-busy --out "$out/act.json" ) \
    > "$out/act.txt" 2>&1
  grep -E "^(bias_|glu_)|ceiling" "$out/act.txt" | head -60
fi
if has loss; then
  echo "== fused linear + cross-entropy benchmark"
  ( cd /tmp && timeout "$(left 300)" python3 -m jaxdnn.bench loss --gpu-busy --out "$out/loss.json" ) \
    > "$out/loss.txt" 2>&1
  grep -E "linear_ce|unfused|xla|device" "$out/loss.txt" | head -20
fi
if has cnn_norms; then
  echo "== CNN norms benchmark"
  ( cd /tmp && timeout "$(left 300)" python3 -m jaxdnn.bench cnn_norms --gpu-busy --out "$out/cnn_norms.json" ) \
    > "$out/cnn_norms.txt" 2>&1
  grep -E "^(bn_|gn32)|ceiling" "$out/cnn_norms.txt" | head -60
fi
if has pool; then
  echo "== pooling benchmark"
  ( cd /tmp && timeout "$(left 300)" python3 -m jaxdnn.bench pool --gpu-busy --out "$out/pool.json" ) \
    > "$out/pool.txt" 2>&1
  grep -E "_pool|ceiling" "$out/pool.txt" | head -40
fi
if has sweep; then
  for sw in ${SWEEP:--}; do
    [ "$sw" = "-" ] && sw=""
    echo "== sweep ${sw:-(defaults)}"
    tag=${sw:-defaults}; tag=${tag//[^A-Za-z0-9_]/_}
    ( cd /tmp && env ${sw//,/ } timeout "$(left 300)" python3 -m jaxdnn.bench "${SWEEP_FAMILY:-softmax}" --gpu-busy \
        ${SWEEP_ARGS:-} --out "$out/sweep-$tag.json" ) > "$out/sweep-$tag.txt" 2>&1
    grep -E "jaxdnn|ceiling" "$out/sweep-$tag.txt" | head -40
  done
fi
if has upstream && [ -f "$repo/build/upstream/nn_test.py" ]; then
  echo "== JAX's attention tests against jaxdnn"
  ( cd /tmp && timeout "$(left 300)" python3 "$repo/tests/upstream/run_jax_attention_tests.py" \
      "$repo/build/upstream/nn_test.py" -rfs ) > "$out/upstream.txt" 2>&1
  grep -E "^(FAILED|SKIPPED|ERROR)|passed|failed" "$out/upstream.txt" | tail -20
fi
