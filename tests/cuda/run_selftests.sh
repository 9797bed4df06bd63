#!/usr/bin/env bash
# Runs the standalone CUDA self-tests (tests/cuda/CMakeLists.txt) in their
# checking modes under a timeout on a GPU machine; with SANITIZE=1 also under
# compute-sanitizer memcheck and racecheck. BINDIR holds binaries built
# beforehand (on a development machine: cmake -DJAXDNN_CUDA_SELFTESTS=ON, then
# carry the folder, so the device call spends its time running); without
# them this builds them into BINDIR/build first. Logs and a summary line per
# run go to OUT. ONLY="name ..." runs just those (names as in the summary).
#   bash tests/cuda/run_selftests.sh OUT [BINDIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?give an output folder}
bin=${2:-build/selftests}
mkdir -p "$out"
deadline=${DEADLINE:-100000}
run() {  # log name, timeout, command...
  local log=$1 limit=$2; shift 2
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $log "* ]] && return
  local left=$((deadline - SECONDS))
  [ "$left" -lt "$limit" ] && limit=$left
  [ "$limit" -le 5 ] && { echo "$log: skipped, past the deadline"; return; }
  timeout "$limit" "$@" > "$out/$log.log" 2>&1
  local rc=$?
  echo "$log: exit $rc; $(grep -ciE 'FAIL' "$out/$log.log") lines with FAIL; $(grep -c 'ALL PASSED' "$out/$log.log") ALL PASSED"
}
tests="sm90_attention_selftest sm90_attention_ext_selftest sm90_attention_bwd_selftest decode_split_selftest rnn_selftest depthwise_selftest depthwise_wgrad_selftest"
b=$bin
if [ ! -x "$bin/rnn_selftest" ]; then
  nanobind_dir=$(python3 -c "import nanobind; print(nanobind.cmake_dir())")
  cmake -S . -B "$bin/build" -G Ninja -DJAXDNN_CUDA=ON -DJAXDNN_CUDA_SELFTESTS=ON \
    -Dnanobind_DIR="$nanobind_dir" -DPython_EXECUTABLE="$(command -v python3)" > "$out/selftests-cmake.log" 2>&1 &&
    ninja -C "$bin/build" $tests > "$out/selftests-build.log" 2>&1 ||
    { echo "self-test build failed"; tail -30 "$out/selftests-build.log"; exit 1; }
  b=$bin/build/tests/cuda
fi
run forward-bf16 300 "$b/sm90_attention_selftest" bf16
run forward-f16 300 "$b/sm90_attention_selftest" f16
run ext-bf16 300 "$b/sm90_attention_ext_selftest" bf16
run bwd-check 300 "$b/sm90_attention_bwd_selftest" check
run bwd-fusedcheck 300 "$b/sm90_attention_bwd_selftest" fusedcheck
run bwd-ext 300 "$b/sm90_attention_bwd_selftest" ext
run decode-check 120 "$b/decode_split_selftest" check
run rnn-check 300 "$b/rnn_selftest" check
run rnn-bench 300 "$b/rnn_selftest" bench
run dw-check 120 "$b/depthwise_selftest" check
run dw-bench 120 "$b/depthwise_selftest" bench
run dwg-check 120 "$b/depthwise_wgrad_selftest" check
run dwg-bench 120 "$b/depthwise_wgrad_selftest" bench
if [ -n "${SANITIZE:-}" ]; then
  run memcheck-decode 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$b/decode_split_selftest" check
  run memcheck-bwd 400 compute-sanitizer --tool memcheck --error-exitcode 9 "$b/sm90_attention_bwd_selftest" check
  # Through jax (memcheck only: racecheck through jax does not finish), from
  # outside the source tree so that the installed package is imported.
  run memcheck-jax 300 bash -c "cd /tmp && compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 $PWD/tests/cuda/memcheck_smoke.py"
  run racecheck-decode 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$b/decode_split_selftest" check
  run memcheck-rnn 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$b/rnn_selftest" check
  run racecheck-rnn 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$b/rnn_selftest" check
  run memcheck-dw 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$b/depthwise_selftest" check
  run memcheck-dwg 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$b/depthwise_wgrad_selftest" check
  run racecheck-dwg 200 compute-sanitizer --tool racecheck --error-exitcode 9 "$b/depthwise_wgrad_selftest" check
fi
