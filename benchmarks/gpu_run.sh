#!/usr/bin/env bash
# The GPU machine's run: build jaxdnn, run the whole test suite (GPU tests
# included), the CUDA self-tests (with compute-sanitizer), and the
# benchmarks, writing everything to OUT. One device call is at most 600 s, so
# STEPS picks what this call does (default: all, in this order):
#   selftests_beside build tests rnn_ncu selftests gemm1x1_bench rnn_selftest_bench norms attention softmax act loss cnn_norms pool conv rnn upstream (and sweep, below;
#   norms_grid: issue 23's LayerNorm/RMSNorm grid against XLA, GRID_ARGS its arguments)
#   bash benchmarks/gpu_run.sh OUT [pytest args...]
# SELFTEST_BIN: self-test binaries built beforehand (tests/cuda/run_selftests.sh);
# SELFTEST_ONLY: names of the self-test runs to do (run_selftests.sh's ONLY).
# NCU_BESIDE: a self-test kernel to profile beside the build (below).
# RNN_ARGS: arguments of `python -m jaxdnn.bench rnn`. RNN_BENCH_SWEEP: the
# recurrence self-test bench once per entry of switches (below).
# upstream: JAX's own attention tests (tests/upstream/), given JAX's
# tests/nn_test.py carried as build/upstream/nn_test.py.
# sweep: one benchmark process per SWEEP entry (space-separated entries of
# comma-separated VAR=value switches; "-" for none), `python -m jaxdnn.bench $SWEEP_FAMILY $SWEEP_ARGS`,
# a switch being read once per process.
# CNN_NORMS_ARGS, CONV_ARGS: arguments of those benchmarks.
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
# Anchors carried as wheels (Liger-Kernel: `.whl` named in the call's carry).
if ls "$repo"/.whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/anchor-site "$repo"/.whl/*.whl && export PYTHONPATH=/tmp/anchor-site${PYTHONPATH:+:$PYTHONPATH}
fi

# Self-tests from binaries built beforehand (SELFTEST_BIN) run their checks
# while jaxdnn builds (the build is host work): step selftests_beside.
# gemm1x1_bin: the conv 1x1 GEMM self-test from SELFTEST_BIN (built by
# cmake as conv1x1_gemm_sm90_selftest), checks and memcheck; its bench mode
# runs in the step gemm1x1_bench, after the tests.
selftests_beside() {
  ONLY="${SELFTEST_ONLY:-}" DEADLINE=${BESIDE_SECONDS:-240} SANITIZE=1 bash "$repo/tests/cuda/run_selftests.sh" \
    "$out/selftests" "${SELFTEST_BIN:-$repo/build/selftests}" > "$out/selftests.txt" 2>&1 &
  if [ -x "${SELFTEST_BIN:-}/conv1x1_gemm_sm90_selftest" ]; then
    local b=$SELFTEST_BIN/conv1x1_gemm_sm90_selftest
    { for tile in auto 128 256; do echo "-- JAXDNN_CONV_1X1_GEMM=$tile"; JAXDNN_CONV_1X1_GEMM=$tile timeout 120 "$b"; echo "exit $?"; done
      timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$b" > "$out/gemm1x1_memcheck.log" 2>&1
      echo "memcheck exit $?"; tail -3 "$out/gemm1x1_memcheck.log"; } > "$out/gemm1x1.txt" 2>&1
  fi
  wait
  # NCU_BESIDE="binary-name args... --kernel-regex": Nsight Compute on one
  # kernel of a prebuilt self-test (SELFTEST_BIN), sections, stall reasons
  # and SASS with stall samples, after the self-tests above.
  if [ -n "${NCU_BESIDE:-}" ]; then
    local cmd=(${NCU_BESIDE% --*}) kre=${NCU_BESIDE##* --}
    timeout 200 ncu --clock-control none --set full --import-source no -k "regex:$kre" --launch-skip 1 \
      --launch-count 1 -f -o /tmp/ncu_beside "$SELFTEST_BIN/${cmd[0]}" "${cmd[@]:1}" > "$out/ncu_beside.log" 2>&1
    ncu -i /tmp/ncu_beside.ncu-rep --page details --print-details all > "$out/ncu_beside.txt" 2>&1
    ncu -i /tmp/ncu_beside.ncu-rep --page source --print-source sass --csv > "$out/ncu_beside_sass.csv" 2>&1
  fi
}
beside=
if has selftests_beside; then selftests_beside & beside=$!; fi
if has build; then
  echo "== build"
  ( cd "$repo" && time python3 -m pip install --no-build-isolation --no-deps -v . ) > "$out/build.log" 2>&1 \
    || { tail -50 "$out/build.log"; exit 1; }
  grep -E "Successfully installed" "$out/build.log" | tail -1
fi
if [ -n "$beside" ]; then
  wait "$beside"
  echo "== CUDA self-tests (beside the build)"; cat "$out/selftests.txt"
  # RNN_MMA_GATE=1: a failed rnn-check sends the rest of the call to the FMA
  # product (JAXDNN_RNN_MMA=0), so the tests and tables still measure a
  # kernel that passed its check.
  if [ "${RNN_MMA_GATE:-0}" = 1 ] && ! grep -q "^rnn-check: exit 0" "$out/selftests.txt"; then
    export JAXDNN_RNN_MMA=0
    echo "rnn-check failed: the rest of this call runs with JAXDNN_RNN_MMA=0"
  fi
  [ -f "$out/gemm1x1.txt" ] && grep -E "exit|PASS|FAIL|passed|failed|ERROR" "$out/gemm1x1.txt" | tail -20
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
# rnn_ncu: Nsight Compute on the recurrence's kernels (self-test bench of one
# shape, RNN_NCU_SHAPE "mode B H"): sections and stall reasons, then the SASS
# lines with their stall samples (rnn_ncu_*.txt, *_sass.csv).
if has rnn_ncu; then
  echo "== rnn ncu"
  b=${SELFTEST_BIN:-$repo/build/selftests}/rnn_selftest
  for k in RnnFwdKernel RnnBwdKernel; do
    rep=/tmp/ncu_$k
    timeout "$(left 200)" ncu --clock-control none --set full --import-source no -k "regex:$k" --launch-skip 1 \
      --launch-count 1 -f -o "$rep" "$b" bench ${RNN_NCU_SHAPE:-lstm 64 1024} > "$out/rnn_ncu_$k.log" 2>&1
    ncu -i "$rep.ncu-rep" --page details --print-details all > "$out/rnn_ncu_$k.txt" 2>&1
    ncu -i "$rep.ncu-rep" --page source --print-source sass --csv > "$out/rnn_ncu_${k}_sass.csv" 2>&1
    grep -iE "stall|Duration|Throughput|Issue|Occupancy" "$out/rnn_ncu_$k.txt" | head -60
  done
fi
if has selftests; then
  echo "== CUDA self-tests"
  ONLY="${SELFTEST_ONLY:-}" DEADLINE=$((budget - 60)) SANITIZE=1 bash "$repo/tests/cuda/run_selftests.sh" "$out/selftests" \
    "${SELFTEST_BIN:-$repo/build/selftests}" 2>&1 | tee "$out/selftests.txt"
fi
# bench STEP SECONDS PATTERN [ARGS...]: `python -m jaxdnn.bench STEP` into
# OUT/STEP.{txt,json}, printing the lines that match PATTERN.
bench() {
  local step=$1 secs=$2 pattern=$3
  shift 3
  has "$step" || return 0
  echo "== $step benchmark"
  # GPU-busy times for the memory-bound tables (conv's kernels are long enough
  # for host timing, and CUPTI would double its run time).
  local busy=--gpu-busy
  [ "$step" = conv ] && busy=
  ( cd /tmp && timeout "$(left "$secs")" python3 -m jaxdnn.bench "$step" $busy "$@" \
      --out "$out/$step.json" ) > "$out/$step.txt" 2>&1
  grep -E "$pattern" "$out/$step.txt" | grep -vE "WARNING|warn|^ *tq, tk" | tail -60
}
if has gemm1x1_bench && [ -x "${SELFTEST_BIN:-}/conv1x1_gemm_sm90_selftest" ]; then
  echo "== conv 1x1 GEMM self-test bench"
  for tile in auto 128 256; do
    echo "-- JAXDNN_CONV_1X1_GEMM=$tile"
    JAXDNN_CONV_1X1_GEMM=$tile timeout "$(left 90)" "$SELFTEST_BIN/conv1x1_gemm_sm90_selftest" bench
  done 2>&1 | tee "$out/gemm1x1_bench.txt" | tail -40
fi
if has rnn_selftest_bench; then
  echo "== rnn self-test bench"
  # RNN_BENCH_SWEEP: entries of comma-separated VAR=value switches ("-": none).
  for sw in ${RNN_BENCH_SWEEP:--}; do
    echo "-- ${sw}"
    env $( [ "$sw" = - ] || echo "${sw//,/ }" ) timeout "$(left 120)" \
      "${SELFTEST_BIN:-$repo/build/selftests}/rnn_selftest" bench
  done 2>&1 | tee "$out/rnn_selftest_bench.txt" | tail -40
fi
bench norms 240 "^(layer|rms)|ceiling"
bench attention 420 "." ${ATTENTION_ARGS:---dims 128}
bench softmax 300 "^(softmax|log_|cross)|ceiling"
bench act 300 "^(bias_|glu_)|ceiling"
bench loss 300 "linear_ce|unfused|xla|device"
bench cnn_norms 300 "^(bn_|gn32)|ceiling" ${CNN_NORMS_ARGS:-}
bench pool 300 "_pool|ceiling"
bench conv 480 "r50|depthwise|grouped|transposed|3D|1D|unet|device" ${CONV_ARGS:-}
bench rnn 480 "lstm|gru|geomean|device" ${RNN_ARGS:-}
if has norms_grid; then
  # GRID_SWEEP: space-separated entries of comma-separated VAR=value switches
  # ("-" for none), one grid process each (norms_grid-TAG.{txt,json}).
  for sw in ${GRID_SWEEP:--}; do
    [ "$sw" = "-" ] && sw=""
    tag=${sw:-defaults}; tag=${tag//[^A-Za-z0-9_]/_}
    echo "== norms grid (issue 23) ${sw:-(defaults)}"
    ( cd /tmp && env ${sw//,/ } timeout "$(left 420)" python3 -m jaxdnn.bench norms_grid ${GRID_ARGS:-} \
        --out "$out/norms_grid-$tag.json" ) > "$out/norms_grid-$tag.txt" 2>&1
    grep -E "geomean|cells|Error|error" "$out/norms_grid-$tag.txt" | tail -20
  done
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
# A device call brings back at most 8 files: everything under OUT goes back
# as one archive (PACK=0 leaves the files as they are).
if [ "${PACK:-1}" = 1 ]; then
  tmp=$(mktemp -d)
  ( cd "$out" && tar czf "$tmp/run.tgz" . ) && rm -rf "${out:?}"/* && mv "$tmp/run.tgz" "$out/"
fi
